package order

import (
	"errors"
	"strings"
	"testing"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"
)

var (
	storeA    = uuid.MustParse("00000000-0000-0000-0000-0000000000a1")
	storeB    = uuid.MustParse("00000000-0000-0000-0000-0000000000b1")
	vTee      = uuid.MustParse("10000000-0000-0000-0000-000000000001")
	vHoodie   = uuid.MustParse("10000000-0000-0000-0000-000000000002")
	vCap      = uuid.MustParse("10000000-0000-0000-0000-000000000003")
	vTote     = uuid.MustParse("10000000-0000-0000-0000-000000000004")
	vArchived = uuid.MustParse("10000000-0000-0000-0000-000000000005")
	vOther    = uuid.MustParse("10000000-0000-0000-0000-000000000006")
	vHoodieNY = uuid.MustParse("10000000-0000-0000-0000-000000000007") // a hoodie with no yarn rule
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func testCatalog() map[uuid.UUID]Variant {
	v := func(id, store uuid.UUID, cat, price string, yarn []string, status string) Variant {
		return Variant{VariantID: id, StoreID: store, StoreStatus: "ACTIVE", ProductStatus: status, Category: cat,
			RequiresYarnType: yarn, Price: dec(price), SKU: "SKU-" + cat, Title: cat}
	}
	return map[uuid.UUID]Variant{
		vTee:      v(vTee, storeA, "tshirt", "14.50", nil, "ACTIVE"),
		vHoodie:   v(vHoodie, storeA, "hoodie", "29.90", []string{"yarn_6_7mm", "yarn_8_10mm", "yarn_20mm"}, "ACTIVE"),
		vCap:      v(vCap, storeA, "cap", "15.00", []string{"plat_emb", "emb_3d_puff"}, "ACTIVE"),
		vTote:     v(vTote, storeA, "tote", "11.00", nil, "ACTIVE"),
		vArchived: v(vArchived, storeA, "tshirt", "10.00", nil, "ARCHIVED"),
		vOther:    v(vOther, storeB, "tshirt", "10.00", nil, "ACTIVE"),
		vHoodieNY: v(vHoodieNY, storeA, "hoodie", "25.00", nil, "ACTIVE"),
	}
}

func testRates() Rates {
	return Rates{
		Shipping: map[string]map[string]ShippingRate{
			"tshirt": {"eco": {dec("4.75"), dec("1.50")}, "premium": {dec("9.50"), dec("2.50")}},
			"hoodie": {"eco": {dec("8.50"), dec("3.00")}, "premium": {dec("14.00"), dec("4.50")}},
			"cap":    {"eco": {dec("5.25"), dec("1.75")}, "premium": {dec("10.00"), dec("2.75")}},
			"tote":   {"eco": {dec("4.50"), dec("1.25")}, "premium": {dec("9.00"), dec("2.25")}},
		},
		Sides: map[string]map[string]decimal.Decimal{
			"tshirt": {"front_side": dec("0"), "back": dec("2.40"), "left_sleeve": dec("1.40")},
			"hoodie": {"front_side": dec("0"), "back": dec("3.00")},
		},
		Yarn:           map[string]map[string]decimal.Decimal{"hoodie": {"yarn_6_7mm": dec("0"), "yarn_20mm": dec("2.50")}, "cap": {"emb_3d_puff": dec("2.00")}},
		Countries:      map[string]bool{"US": true, "DE": true},
		OrderAddonFees: map[string]decimal.Decimal{},
	}
}

// base is a valid standard order body with one t-shirt line.
const base = `{
 "reference_id": "R-1",
 "customer": {"email": "ann@example.com", "first_name": "Ann", "last_name": "Lee"},
 "shipping_address": {"address1": "1 Main St", "city": "Austin", "province": "TX", "country_code": "US", "zip": "73301"},
 "line_items": [{"variant_id": "10000000-0000-0000-0000-000000000001", "quantity": 2, "sides": {"front_side": "https://img.example/a.png"}}]
}`

// with returns base with top-level keys replaced (null deletes).
func with(t testing.TB, changes map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(base), &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range changes {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, _ := json.Marshal(m)
	return b
}

func line(changes map[string]any) map[string]any {
	l := map[string]any{"variant_id": vTee.String(), "quantity": 1, "sides": map[string]any{"front_side": "https://img.example/a.png"}}
	for k, v := range changes {
		if v == nil {
			delete(l, k)
		} else {
			l[k] = v
		}
	}
	return l
}

func lines(ls ...map[string]any) map[string]any { return map[string]any{"line_items": ls} }

func validate(t *testing.T, body []byte) (Draft, error) {
	t.Helper()
	req, err := DecodeCreate(body)
	if err != nil {
		return Draft{}, err
	}
	return Validate(req, testCatalog(), testRates())
}

// TestARequestOverTheLineLimitNamesNoVariantToLookUp: a body of thousands
// of lines is refused for its count without its variants being looked up
// (found by review: the lookup and the de-duplication ran first).
func TestARequestOverTheLineLimitNamesNoVariantToLookUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines int
		ids   int
	}{{"a request at the limit names each distinct variant", maxLines, maxLines}, {"a request past it names none", 20_000, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			ls := make([]map[string]any, tc.lines)
			for i := range ls {
				ls[i] = line(map[string]any{"variant_id": uuid.New().String()})
			}
			req, err := DecodeCreate(with(t, lines(ls...)))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(req.VariantIDs()); got != tc.ids {
				t.Fatalf("%d variant ids to look up, want %d", got, tc.ids)
			}
			if tc.lines > maxLines {
				_, err := Validate(req, nil, testRates())
				if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != "line_items" {
					t.Fatalf("Validate: %v, want an error on line_items", err)
				}
			}
		})
	}
}

// TestABodyWrongInTwoFieldsIsAlwaysRefusedForTheSameOne: the fields are
// read in a set order, not a map's (found by review).
func TestABodyWrongInTwoFieldsIsAlwaysRefusedForTheSameOne(t *testing.T) {
	body := []byte(`{"zzz": 1, "note": 5, "tags": "x", "reference_id": "R-1"}`)
	var first string
	for i := range 50 {
		_, err := decodeCreateByField(body)
		fe, ok := errors.AsType[*FieldError](err)
		if !ok {
			t.Fatalf("%v, want a field error", err)
		}
		if i == 0 {
			first = fe.Field
		} else if fe.Field != first {
			t.Fatalf("refused for %s, then for %s", first, fe.Field)
		}
	}
}

// TestCustomerFieldsAreKeptAsChecked: an email is checked without its
// surrounding spaces and kept so (found by review: it was kept with them,
// and pushed so), and fields at their length limit are taken.
func TestCustomerFieldsAreKeptAsChecked(t *testing.T) {
	d, err := validate(t, with(t, map[string]any{"customer": map[string]any{"email": " ann@example.com ",
		"first_name": strings.Repeat("é", maxPartyField), "last_name": "Lee"}}))
	if err != nil {
		t.Fatal(err)
	}
	if d.Customer.Email != "ann@example.com" {
		t.Fatalf("email kept as %q", d.Customer.Email)
	}
}

func TestReferenceIDIsComparedInNFC(t *testing.T) {
	nfc, _ := validate(t, with(t, map[string]any{"reference_id": "caf\u00e9"}))
	nfd, _ := validate(t, with(t, map[string]any{"reference_id": "cafe\u0301"}))
	if nfc.ReferenceID != nfd.ReferenceID || OrderID(storeA, nfc.ReferenceID) != OrderID(storeA, nfd.ReferenceID) {
		t.Fatalf("NFC %q and NFD %q are two references", nfc.ReferenceID, nfd.ReferenceID)
	}
}

func TestCreateRules(t *testing.T) {
	label := map[string]any{"shipping_address": nil, "label_link": "https://labels.example/l.pdf", "tracking_number": "1Z999"}
	tests := []struct {
		name    string
		body    []byte
		field   string
		message string // exact message; "" = valid
	}{
		{"valid standard order", with(t, nil), "", ""},
		{"valid label order", with(t, label), "", ""},
		{"reference_id is optional", with(t, map[string]any{"reference_id": nil}), "", ""},
		{"reference_id with a bell is refused", with(t, map[string]any{"reference_id": "R\a1"}), "reference_id", "reference_id must not contain control or format characters (such as bidi overrides or zero-width spaces)"},
		{"reference_id with a right-to-left override is refused", with(t, map[string]any{"reference_id": "R\u202e1"}), "reference_id", "reference_id must not contain control or format characters (such as bidi overrides or zero-width spaces)"},
		{"reference_id with a zero-width space is refused", with(t, map[string]any{"reference_id": "R\u200b1"}), "reference_id", "reference_id must not contain control or format characters (such as bidi overrides or zero-width spaces)"},
		{"a side URL with a space is refused", with(t, lines(line(map[string]any{"sides": map[string]any{"front_side": "https://i.example/a b.png"}}))), "line_items[0].sides.front_side", "line_items[0].sides.front_side contains a space at position 20, which a URI may not hold unescaped; percent-encode it as %20"},
		{"a label link with angle brackets is refused", with(t, map[string]any{"shipping_address": nil, "label_link": "https://l.example/<x>.pdf", "tracking_number": "1Z"}), "label_link", "label_link contains '<' at position 19, which a URI may not hold unescaped; percent-encode it as %3C"},
		{"reference_id in another script is accepted", with(t, map[string]any{"reference_id": "заказ-1"}), "", ""},
		{"phone is optional", with(t, map[string]any{"customer": map[string]any{"email": "a@b.co", "first_name": "A", "last_name": "B", "phone": "+1 555"}}), "", ""},
		{"neither address nor label", with(t, map[string]any{"shipping_address": nil}), "shipping_address", "shipping_address is required for standard orders; label orders send label_link and tracking_number instead"},
		{"address and label", with(t, map[string]any{"label_link": "https://l.example/x.pdf", "tracking_number": "1Z"}), "shipping_address", "shipping_address must not be provided for label orders"},
		{"a tracking number of 101 characters", with(t, map[string]any{"shipping_address": nil, "label_link": "https://l.example/x.pdf", "tracking_number": strings.Repeat("1", 101)}), "tracking_number", "tracking_number must be at most 100 characters"},
		{"a tracking number with a bidi override", with(t, map[string]any{"shipping_address": nil, "label_link": "https://l.example/x.pdf", "tracking_number": "1Z\u202e99"}), "tracking_number", "tracking_number must not contain control or format characters (such as bidi overrides or zero-width spaces)"},
		{"a tracking number ending in a line feed", with(t, map[string]any{"shipping_address": nil, "label_link": "https://l.example/x.pdf", "tracking_number": "1Z99\n"}), "tracking_number", "tracking_number must not contain control or format characters (such as bidi overrides or zero-width spaces)"},
		{"label without tracking", with(t, map[string]any{"shipping_address": nil, "label_link": "https://l.example/x.pdf"}), "tracking_number", "label_link and tracking_number must both be provided"},
		{"tracking without label", with(t, map[string]any{"shipping_address": nil, "tracking_number": "1Z"}), "label_link", "label_link and tracking_number must both be provided"},
		{"missing customer", with(t, map[string]any{"customer": nil}), "customer", "customer is required"},
		{"bad email", with(t, map[string]any{"customer": map[string]any{"email": "nope", "first_name": "A", "last_name": "B"}}), "customer.email", "customer.email is not a valid email address"},
		{"a first name of 256 characters", with(t, map[string]any{"customer": map[string]any{"email": "a@b.example", "first_name": strings.Repeat("é", 256), "last_name": "B"}}), "customer.first_name", "customer.first_name must be at most 255 characters"},
		{"a phone of 256 characters", with(t, map[string]any{"customer": map[string]any{"email": "a@b.example", "first_name": "A", "last_name": "B", "phone": strings.Repeat("1", 256)}}), "customer.phone", "customer.phone must be at most 255 characters"},
		{"an address line of 256 characters", with(t, map[string]any{"shipping_address": map[string]any{"address1": "1", "address2": strings.Repeat("x", 256), "city": "c", "province": "TX", "country_code": "US", "zip": "1"}}), "shipping_address.address2", "shipping_address.address2 must be at most 255 characters"},
		{"missing city", with(t, map[string]any{"shipping_address": map[string]any{"address1": "1", "province": "TX", "country_code": "US", "zip": "1"}}), "shipping_address.city", "shipping_address.city is required"},
		{"unknown country", with(t, map[string]any{"shipping_address": map[string]any{"address1": "1", "city": "c", "province": "TX", "country_code": "XX", "zip": "1"}}), "shipping_address.country_code", `shipping_address.country_code "XX" is not a valid country code`},
		{"bad shipping service", with(t, map[string]any{"shipping_service": "express"}), "shipping_service", "shipping_service must be eco or premium"},
		{"no lines", with(t, lines()), "line_items", "line_items must contain at least one line item"},
		{"empty sides", with(t, lines(line(map[string]any{"sides": map[string]any{}}))), "line_items[0].sides", "At least one side design is required"},
		{"only a mockup", with(t, lines(line(map[string]any{"sides": map[string]any{"mockup_url": "https://m.example/m.png"}}))), "line_items[0].sides", "At least one side design is required"},
		{"unknown side", with(t, lines(line(map[string]any{"sides": map[string]any{"chest": "https://a.example/x.png"}}))), "line_items[0].sides.chest", "Invalid side code"},
		{"a side that is not a string is named by its key", with(t, lines(line(map[string]any{"sides": map[string]any{"back": 7}}))), "line_items[0].sides.back", "line_items[0].sides.back must be a string"},
		{"a side key with a slash is named as sent", with(t, lines(line(map[string]any{"sides": map[string]any{"a/b~c": true}}))), "line_items[0].sides.a/b~c", "line_items[0].sides.a/b~c must be a string"},
		{"side url scheme", with(t, lines(line(map[string]any{"sides": map[string]any{"back": "ftp://a.example/x.png"}}))), "line_items[0].sides.back", "line_items[0].sides.back must be an image URL starting with http:// or https:// (at most 2048 characters)"},
		{"unknown variant", with(t, lines(line(map[string]any{"variant_id": uuid.NewString()}))), "line_items[0].variant_id", "variant_id not found"},
		{"archived product", with(t, lines(line(map[string]any{"variant_id": vArchived.String()}))), "line_items[0].variant_id", "variant is not available"},
		{"two stores", with(t, lines(line(nil), line(map[string]any{"variant_id": vOther.String()}))), "line_items[1].variant_id", "line items must belong to one store"},
		{"quantity 0", with(t, lines(line(map[string]any{"quantity": 0}))), "line_items[0].quantity", "line_items[0].quantity must be from 1 to 1000"},
		{"quantity 1001", with(t, lines(line(map[string]any{"quantity": 1001}))), "line_items[0].quantity", "line_items[0].quantity must be from 1 to 1000"},
		{"yarn required", with(t, lines(line(map[string]any{"variant_id": vHoodie.String()}))), "line_items[0].yarn_type", "yarn_type is required for this product"},
		{"yarn not allowed", with(t, lines(line(map[string]any{"yarn_type": "yarn_20mm"}))), "line_items[0].yarn_type", "yarn_type is not allowed for this product"},
		{"yarn of another category", with(t, lines(line(map[string]any{"variant_id": vHoodie.String(), "yarn_type": "plat_emb"}))), "line_items[0].yarn_type", `yarn_type "plat_emb" not allowed for hoodie`},
		{"yarn allowed", with(t, lines(line(map[string]any{"variant_id": vHoodie.String(), "yarn_type": "yarn_20mm"}))), "", ""},
		{"technique and emb", with(t, lines(line(map[string]any{"printing_technique": "DTG", "emb_file": "Available"}))), "line_items[0].emb_file", "a line uses printing_technique or emb_file, never both"},
		{"bad technique", with(t, lines(line(map[string]any{"printing_technique": "screen"}))), "line_items[0].printing_technique", "line_items[0].printing_technique must be DTG or DTF"},
		{"emb available alone", with(t, lines(line(map[string]any{"emb_file": "Available"}))), "", ""},
		{"emb available with extra", with(t, lines(line(map[string]any{"emb_file": "Available", "design_emb_type": "text only"}))), "line_items[0].design_emb_type", "emb_file 'Available' needs no other embroidery field"},
		{"no emb file needs design type", with(t, lines(line(map[string]any{"emb_file": "No EMB file"}))), "line_items[0].design_emb_type", "line_items[0].design_emb_type is required when emb_file is 'No EMB file'"},
		{"photo needs pets", with(t, lines(line(map[string]any{"emb_file": "No EMB file", "design_emb_type": "Photo to Embroidery"}))), "line_items[0].number_of_pets", "line_items[0].number_of_pets is required when design_emb_type is 'Photo to Embroidery'"},
		{"pets 4 on a tee", with(t, lines(line(map[string]any{"emb_file": "No EMB file", "design_emb_type": "Photo to Embroidery", "number_of_pets": 4}))), "", ""},
		{"pets 5 on a tee", with(t, lines(line(map[string]any{"emb_file": "No EMB file", "design_emb_type": "Photo to Embroidery", "number_of_pets": 5}))), "line_items[0].number_of_pets", "line_items[0].number_of_pets must be from 1 to 4 for tshirt"},
		{"pets 3 on a cap", with(t, lines(line(map[string]any{"variant_id": vCap.String(), "yarn_type": "plat_emb", "emb_file": "No EMB file", "design_emb_type": "Photo to Embroidery", "number_of_pets": 3}))), "line_items[0].number_of_pets", "line_items[0].number_of_pets must be from 1 to 2 for cap"},
		{"pets 0", with(t, lines(line(map[string]any{"emb_file": "No EMB file", "design_emb_type": "Photo to Embroidery", "number_of_pets": 0}))), "line_items[0].number_of_pets", "line_items[0].number_of_pets must be from 1 to 4 for tshirt"},
		{"addon on a tee", with(t, lines(line(map[string]any{"addon_service": "fabric_applique"}))), "", ""},
		{"addon unknown", with(t, lines(line(map[string]any{"addon_service": "glitter"}))), "line_items[0].addon_service", "line_items[0].addon_service must be fabric_applique or lace_applique_emb"},
		{"addon on a tote", with(t, lines(line(map[string]any{"variant_id": vTote.String(), "addon_service": "fabric_applique"}))), "line_items[0].addon_service", "addon_service fabric_applique is not available for this product (tote)"},
		{"addon on a yarn product", with(t, lines(line(map[string]any{"variant_id": vHoodie.String(), "yarn_type": "yarn_6_7mm", "addon_service": "lace_applique_emb"}))), "line_items[0].addon_service", "addon_service lace_applique_emb is not available for this product (hoodie)"},
		{"order addon old string form", with(t, map[string]any{"addon_service": "carton_box"}), "", ""},
		{"order addon bad value", with(t, map[string]any{"addon_service": []string{"gift_wrap"}}), "addon_service[0]", "addon_service values must be carton_box or scan_label"},
		{"wrong type quantity", with(t, lines(line(map[string]any{"quantity": "two"}))), "line_items[0].quantity", "line_items[0].quantity must be a whole number"},
		{"wrong type customer", with(t, map[string]any{"customer": "ann"}), "customer", "customer must be an object"},
		{"unknown top-level field", with(t, map[string]any{"colour": "red"}), "colour", "unknown field colour"},
		{"unknown line field", with(t, lines(line(map[string]any{"size": "M"}))), "line_items[0].size", "unknown field line_items[0].size"},
		{"bad variant id", with(t, lines(line(map[string]any{"variant_id": "v-1"}))), "line_items[0].variant_id", "line_items[0].variant_id must be a UUID string"},
		{"missing variant id", with(t, lines(line(map[string]any{"variant_id": nil}))), "line_items[0].variant_id", "line_items[0].variant_id is required"},
		{"not an object", []byte(`[1,2]`), "", "request body must be a JSON object"},
		{"malformed json", []byte(`{"reference_id": `), "", "request body must be a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := validate(t, tt.body)
			if tt.message == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			fe, ok := err.(*FieldError)
			if !ok {
				t.Fatalf("error %v (%T), want a FieldError", err, err)
			}
			if fe.Field != tt.field || fe.Message != tt.message {
				t.Fatalf("got field %q message %q\nwant field %q message %q", fe.Field, fe.Message, tt.field, tt.message)
			}
		})
	}
}

func TestOrderAddonForms(t *testing.T) {
	for raw, want := range map[string]string{`null`: "", `"scan_label"`: "scan_label", `["carton_box","scan_label","carton_box"]`: "carton_box,scan_label", `[]`: ""} {
		body := strings.Replace(base, `"reference_id": "R-1",`, `"reference_id": "R-1", "addon_service": `+raw+`,`, 1)
		d, err := validate(t, []byte(body))
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if got := strings.Join(d.AddonService, ","); got != want || d.AddonService == nil {
			t.Errorf("%s: got %q (%v), want %q", raw, got, d.AddonService, want)
		}
	}
}

func TestPricing(t *testing.T) {
	tests := []struct {
		name                        string
		body                        []byte
		subtotal, shipping, grand   string
		lineTotals, addonSurcharges []string
	}{
		{
			// 2 tees with only a front side: 2 x 14.50; shipping 4.75 + 1.50.
			name: "one line", body: with(t, nil),
			subtotal: "29.00", shipping: "6.25", grand: "35.25",
			lineTotals: []string{"29.00"}, addonSurcharges: []string{"0.00"},
		},
		{
			// tee x3 front+back+sleeve with fabric_applique: unit 14.50+0+2.40+1.40+1.50 = 19.80, x3 = 59.40;
			// hoodie x1 yarn_20mm back: 29.90+3.00+2.50 = 35.40.
			// shipping: hoodie has the highest base (8.50); tees pay 3 x 1.50.
			name: "sides, yarn, add-on and mixed shipping",
			body: with(t, lines(
				line(map[string]any{"quantity": 3, "addon_service": "fabric_applique", "sides": map[string]any{"front_side": "https://a.example/1.png", "back": "https://a.example/2.png", "left_sleeve": "https://a.example/3.png", "mockup_url": "https://a.example/m.png"}}),
				line(map[string]any{"variant_id": vHoodie.String(), "yarn_type": "yarn_20mm", "sides": map[string]any{"back": "https://a.example/4.png"}}),
			)),
			subtotal: "94.80", shipping: "13.00", grand: "107.80",
			lineTotals: []string{"59.40", "35.40"}, addonSurcharges: []string{"4.50", "0.00"},
		},
		{
			name:     "premium shipping",
			body:     with(t, map[string]any{"shipping_service": "premium"}),
			subtotal: "29.00", shipping: "12.00", grand: "41.00",
			lineTotals: []string{"29.00"}, addonSurcharges: []string{"0.00"},
		},
		{
			name:     "label orders ship for 0",
			body:     with(t, map[string]any{"shipping_address": nil, "label_link": "https://l.example/x.pdf", "tracking_number": "1Z"}),
			subtotal: "29.00", shipping: "0.00", grand: "29.00",
			lineTotals: []string{"29.00"}, addonSurcharges: []string{"0.00"},
		},
		{
			// lace 2.00 x 7 = 14.00; unit 14.50 + 2.00 = 16.50 x 7 = 115.50; shipping 4.75 + 6 x 1.50.
			name:     "lace add-on per item",
			body:     with(t, lines(line(map[string]any{"quantity": 7, "addon_service": "lace_applique_emb"}))),
			subtotal: "115.50", shipping: "13.75", grand: "129.25",
			lineTotals: []string{"115.50"}, addonSurcharges: []string{"14.00"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := validate(t, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			p := d.Pricing
			if p.Subtotal.StringFixed(2) != tt.subtotal || p.ShippingTotal.StringFixed(2) != tt.shipping || p.GrandTotal.StringFixed(2) != tt.grand || p.DiscountAmount.StringFixed(2) != "0.00" {
				t.Fatalf("pricing %+v, want subtotal %s shipping %s grand %s", p, tt.subtotal, tt.shipping, tt.grand)
			}
			for i, l := range d.Lines {
				if l.LineTotal.StringFixed(2) != tt.lineTotals[i] || l.LineAddonSurcharge.StringFixed(2) != tt.addonSurcharges[i] {
					t.Errorf("line %d: total %s addon %s, want %s %s", i, l.LineTotal.StringFixed(2), l.LineAddonSurcharge.StringFixed(2), tt.lineTotals[i], tt.addonSurcharges[i])
				}
			}
			b, _ := json.Marshal(p)
			if !strings.Contains(string(b), `"grand_total":`+tt.grand) {
				t.Errorf("pricing JSON %s does not carry grand_total as the number %s", b, tt.grand)
			}
		})
	}
}

func TestContentHash(t *testing.T) {
	a, _ := validate(t, with(t, nil))
	b, _ := validate(t, with(t, map[string]any{"reference_id": "R-2", "note": "other note"}))
	if a.ContentHash != b.ContentHash {
		t.Fatal("reference and note must not change the content hash")
	}
	c, _ := validate(t, with(t, lines(line(map[string]any{"quantity": 3}))))
	if a.ContentHash == c.ContentHash {
		t.Fatal("a different quantity must change the content hash")
	}
	addr := map[string]any{"address1": "1  MAIN st", "city": "austin", "province": "tx", "country_code": "us", "zip": "73301"}
	e, _ := validate(t, with(t, map[string]any{"shipping_address": addr}))
	if a.ContentHash != e.ContentHash {
		t.Fatal("address case and spacing must not change the content hash")
	}
}
