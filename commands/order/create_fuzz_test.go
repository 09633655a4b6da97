package order

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzCreateOrder feeds arbitrary bodies to the create decoder and
// validator. Whatever the input: no panic; a refusal is a FieldError with a
// message; an accepted order has 1..100 lines of quantity 1..1000 from one
// known store, a content hash, and a grand total that is the subtotal plus
// shipping minus discount, never negative.
func FuzzCreateOrder(f *testing.F) {
	// body is base with extra applied as by with and line_items replaced by ls.
	body := func(extra map[string]any, ls ...map[string]any) []byte {
		changes := map[string]any{}
		for k, v := range extra {
			changes[k] = v
		}
		changes["line_items"] = ls
		return with(f, changes)
	}
	f.Add([]byte(base))
	f.Add(body(nil, line(map[string]any{"variant_id": vHoodie.String(), "yarn_type": "yarn_8_10mm", "emb_file": "Available"})))
	f.Add(body(nil, line(map[string]any{"variant_id": vCap.String(), "quantity": 3, "yarn_type": "plat_emb"})))
	f.Add(body(map[string]any{"shipping_address": nil, "label_link": "https://labels.example/1.pdf", "tracking_number": "1Z999"}, line(nil)))
	f.Add(body(map[string]any{"addon_service": []string{"carton_box"}}, line(nil),
		line(map[string]any{"variant_id": vTote.String(), "quantity": 1000, "addon_service": "fabric_applique"})))
	for _, s := range []string{`{}`, `[]`, `null`, `{"line_items":[{}]}`, `{"line_items":"x"}`, `{"reference_id":1}`,
		`{"line_items":[{"variant_id":"10000000-0000-0000-0000-000000000001","quantity":1e9}]}`} {
		f.Add([]byte(s))
	}
	catalog, rates := testCatalog(), testRates()
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeCreate(body)
		if err == nil {
			var d Draft
			d, err = Validate(req, catalog, rates)
			if err == nil {
				checkDraft(t, d)
				return
			}
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Message == "" {
			t.Fatalf("refusal %T %v is not a FieldError with a message", err, err)
		}
	})
}

func checkDraft(t *testing.T, d Draft) {
	t.Helper()
	if d.StoreID != storeA && d.StoreID != storeB {
		t.Fatalf("accepted order of unknown store %s", d.StoreID)
	}
	if len(d.Lines) < 1 || len(d.Lines) > 100 {
		t.Fatalf("accepted order with %d lines", len(d.Lines))
	}
	for i, l := range d.Lines {
		if l.Quantity < 1 || l.Quantity > 1000 {
			t.Fatalf("line %d quantity %d", i, l.Quantity)
		}
	}
	if d.ContentHash == "" {
		t.Fatal("accepted order without a content hash")
	}
	p := d.Pricing
	if want := p.Subtotal.Add(p.ShippingTotal.Decimal).Sub(p.DiscountAmount.Decimal); !want.Equal(p.GrandTotal.Decimal) || p.GrandTotal.IsNegative() {
		t.Fatalf("grand total %s, subtotal %s + shipping %s - discount %s", p.GrandTotal, p.Subtotal, p.ShippingTotal, p.DiscountAmount)
	}
}

// FuzzCreateDecodersAgree checks DecodeCreate's fast path against the
// field-by-field reading: a body the fast path accepts is accepted by the
// field-by-field reading too, and decoded the same.
func FuzzCreateDecodersAgree(f *testing.F) {
	f.Add([]byte(base))
	f.Add(with(f, map[string]any{"addon_service": "carton_box", "note": "<&>", "force": true}))
	f.Add(with(f, map[string]any{"addon_service": []string{"a", "b"}, "tags": "x", "label_link": "l", "tracking_number": "t"}))
	for _, s := range []string{
		`{}`, `[]`, `null`, ` {"note":"a"} `, `{"line_items":null}`, `{"line_items":[null]}`, `{"line_items":[{}]}`,
		`{"line_items":[{"variant_id":null,"quantity":null,"sides":null,"number_of_pets":null}]}`,
		`{"line_items":[{"variant_id":"not-a-uuid"}]}`, `{"line_items":[{"variant_id":7}]}`,
		`{"line_items":[{"Quantity":2}]}`, `{"Reference_ID":"r"}`, `{"note":"a","note":"b"}`,
		`{"line_items":[{"sides":{"front":"a","front":"b"}}]}`, `{"customer":null,"shipping_address":{}}`,
		`{"customer":{"EMAIL":"a@b.c"}}`, `{"note":"\ud800"}`, `{"note":"\u0000"}`, "{\"note\":\"\xff\"}",
		`{"line_items":[{"quantity":1e2}]}`, `{"line_items":[{"quantity":2.0}]}`, `{"line_items":[{"quantity":-0}]}`,
		`{"addon_service":null}`, `{"addon_service":""}`, `{"addon_service":[]}`, `{"addon_service":[null]}`,
		`{"reference_id":null,"force":null}`, `{"note":"a"} x`, `{"line_items":[{"variant_id" : "10000000-0000-0000-0000-000000000001" }]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, ok := decodeCreateFast(body)
		if !ok {
			return
		}
		slow, err := decodeCreateByField(body)
		if err != nil {
			t.Fatalf("the fast path accepts %q, the field-by-field reading refuses it: %v", body, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q decodes differently:\nfast  %+v\nfield %+v", body, fast, slow)
		}
	})
}

// TestWellFormedCreateBodiesTakeTheFastPath keeps the fast path in use:
// bodies as clients send them never fall back to the field-by-field
// reading.
func TestWellFormedCreateBodiesTakeTheFastPath(t *testing.T) {
	for name, body := range map[string][]byte{
		"the base order":          []byte(base),
		"order add-ons as a list": with(t, map[string]any{"addon_service": []string{"carton_box"}}),
		"an older single add-on":  with(t, map[string]any{"addon_service": "carton_box"}),
		"a label order": with(t, map[string]any{"shipping_address": nil, "label_link": "https://labels.example/1.pdf",
			"tracking_number": "1Z999"}),
		"every line option": with(t, lines(line(map[string]any{"yarn_type": "yarn_8_10mm", "emb_file": "Available",
			"number_of_pets": 2, "printing_technique": "dtg", "design_emb_type": "flat", "addon_service": "fabric_applique"}))),
	} {
		if _, ok := decodeCreateFast(body); !ok {
			t.Errorf("%s: %s falls back to the field-by-field reading", name, body)
		}
	}
}
