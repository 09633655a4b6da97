package order

import (
	"errors"
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
