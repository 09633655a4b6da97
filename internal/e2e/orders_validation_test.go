package e2e

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/commands/catalog"
	"github.com/printpod/pod/internal/testenv"
	catalogrm "github.com/printpod/pod/projections/catalog"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
	"github.com/shopspring/decimal"
)

// ovAbsent marks a key to delete from a body built by ovWith.
type ovAbsent struct{}

// ovCatalog holds the demo variants the validation test orders.
type ovCatalog struct {
	tee, teeB, zipHoodie, sweatYarn, tote, cap, hat catalogrm.Variant
	archived, draft, credTee                        catalogrm.Variant
	byID                                            map[uuid.UUID]catalogrm.Variant
}

// ovFindVariant returns the first variant of a product with productStatus in
// the demo store with storeStatus that matches.
func ovFindVariant(t *testing.T, d demoEnv, byID map[uuid.UUID]catalogrm.Variant, storeStatus, productStatus, what string,
	match func(catalogrm.Variant) bool) catalogrm.Variant {
	t.Helper()
	st := d.store(t, storeStatus)
	r := d.client.Get("/v1/stores/" + st.StoreID.String() + "/products" + q("status", productStatus, "limit", "100"))
	if r.Status != 200 {
		t.Fatalf("products of %s: %d %s", st.Name, r.Status, r.Body)
	}
	var page struct{ Data []catalogrm.Product }
	r.JSON(t, &page)
	for _, p := range page.Data {
		if p.Status != productStatus {
			t.Fatalf("status=%s listed a %s product: %s", productStatus, p.Status, p.Title)
		}
		for _, v := range p.Variants {
			byID[v.VariantID] = v
			if match(v) {
				return v
			}
		}
	}
	t.Fatalf("no %s variant of a %s product in the %s demo store: %s", what, productStatus, storeStatus, r.Body)
	return catalogrm.Variant{}
}

func ovLoadCatalog(t *testing.T, d demoEnv) ovCatalog {
	t.Helper()
	c := ovCatalog{byID: map[uuid.UUID]catalogrm.Variant{}}
	cat := func(category string, yarn bool) func(catalogrm.Variant) bool {
		return func(v catalogrm.Variant) bool {
			return v.Category == category && (len(v.RequiresYarnType) > 0) == yarn
		}
	}
	find := func(storeStatus, productStatus string, m func(catalogrm.Variant) bool) catalogrm.Variant {
		t.Helper()
		return ovFindVariant(t, d, c.byID, storeStatus, productStatus, fmt.Sprintf("%T", m), m)
	}
	c.tee = find("ACTIVE", "ACTIVE", cat("tshirt", false))
	c.teeB = find("ACTIVE", "ACTIVE", func(v catalogrm.Variant) bool { // a tee of another price
		return v.Category == "tshirt" && v.Price != c.tee.Price
	})
	c.zipHoodie = find("ACTIVE", "ACTIVE", cat("hoodie", true))
	c.sweatYarn = find("ACTIVE", "ACTIVE", func(v catalogrm.Variant) bool {
		return v.Category == "sweatshirt" && len(v.RequiresYarnType) > 0 && !slices.Contains(v.RequiresYarnType, "yarn_6_7mm")
	})
	c.tote = find("ACTIVE", "ACTIVE", cat("tote", false))
	c.cap = find("ACTIVE", "ACTIVE", cat("cap", true))
	c.hat = find("ACTIVE", "ACTIVE", cat("hat", true))
	c.archived = find("ACTIVE", "ARCHIVED", func(catalogrm.Variant) bool { return true })
	c.draft = find("ACTIVE", "DRAFT", func(catalogrm.Variant) bool { return true })
	c.credTee = find("CREDENTIAL_ERROR", "ACTIVE", cat("tshirt", false))
	// The test relies on these facts of the demo catalog.
	if !slices.Equal(c.sweatYarn.RequiresYarnType, []string{"yarn_8_10mm", "yarn_20mm"}) {
		t.Fatalf("chenille sweatshirt yarn types: %v", c.sweatYarn.RequiresYarnType)
	}
	if !slices.Contains(c.cap.RequiresYarnType, "plat_emb") || slices.Contains(c.cap.RequiresYarnType, "yarn_20mm") {
		t.Fatalf("cap yarn types: %v", c.cap.RequiresYarnType)
	}
	if c.tote.RequiresYarnType == nil || c.tee.RequiresYarnType == nil {
		t.Fatalf("requires_yarn_type must be an array, not null: %+v %+v", c.tote, c.tee)
	}
	return c
}

var ovSeq int

// ovImg is a new image URL: every body built gets distinct content, so no
// accepted order is a soft duplicate of another.
func ovImg() string {
	ovSeq++
	return fmt.Sprintf("https://img.example.com/validation/%d.png", ovSeq)
}

func ovWith(m map[string]any, kv ...any) map[string]any {
	for i := 0; i+1 < len(kv); i += 2 {
		k := kv[i].(string)
		if _, del := kv[i+1].(ovAbsent); del {
			delete(m, k)
			continue
		}
		m[k] = kv[i+1]
	}
	return m
}

// ovLine is a valid-looking line (quantity 1, one front print) with changes.
func ovLine(v catalogrm.Variant, kv ...any) map[string]any {
	return ovWith(map[string]any{"variant_id": v.VariantID, "quantity": 1,
		"sides": map[string]any{"front_side": ovImg()}}, kv...)
}

func ovCustomer() map[string]any {
	return map[string]any{"email": "grace@example.com", "first_name": "Grace", "last_name": "Hopper"}
}

func ovAddress() map[string]any {
	return map[string]any{"address1": "12 Harbor Rd", "city": "Portland", "province": "OR", "country_code": "US", "zip": "97201"}
}

// ovOrder is a standard order of lines with changes.
func ovOrder(lines []map[string]any, kv ...any) map[string]any {
	items := make([]any, len(lines))
	for i, l := range lines {
		items[i] = l
	}
	return ovWith(map[string]any{"customer": ovCustomer(), "shipping_address": ovAddress(), "line_items": items}, kv...)
}

func ovLines(ls ...map[string]any) []map[string]any { return ls }

// ovRates are the configuration tables, read over HTTP as decimals.
type ovRates struct {
	base, additional map[string]decimal.Decimal // key category/service
	sides            map[string]decimal.Decimal // key category/side
	yarn             map[string]decimal.Decimal // key category/type
}

func ovDecodeRows(t *testing.T, c *testenv.Client, path string, v any) {
	t.Helper()
	r := c.Get(path)
	if r.Status != 200 {
		t.Fatalf("%s: %d %s", path, r.Status, r.Body)
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, r.Body)
	}
}

func ovDec(t *testing.T, n json.Number) decimal.Decimal {
	t.Helper()
	d, err := decimal.NewFromString(n.String())
	if err != nil {
		t.Fatalf("not a decimal: %q", n)
	}
	return d
}

func ovLoadRates(t *testing.T, c *testenv.Client) ovRates {
	t.Helper()
	r := ovRates{base: map[string]decimal.Decimal{}, additional: map[string]decimal.Decimal{},
		sides: map[string]decimal.Decimal{}, yarn: map[string]decimal.Decimal{}}
	var ship struct {
		Data []struct {
			Category       string      `json:"category"`
			ServiceType    string      `json:"service_type"`
			BaseRate       json.Number `json:"base_rate"`
			AdditionalRate json.Number `json:"additional_rate"`
		} `json:"data"`
	}
	ovDecodeRows(t, c, "/v1/config/shipping-rates", &ship)
	for _, row := range ship.Data {
		r.base[row.Category+"/"+row.ServiceType] = ovDec(t, row.BaseRate)
		r.additional[row.Category+"/"+row.ServiceType] = ovDec(t, row.AdditionalRate)
	}
	var sides struct {
		Data []struct {
			Category  string      `json:"category"`
			SideCode  string      `json:"side_code"`
			Surcharge json.Number `json:"surcharge"`
		} `json:"data"`
	}
	ovDecodeRows(t, c, "/v1/config/pricing-sides", &sides)
	for _, row := range sides.Data {
		r.sides[row.Category+"/"+row.SideCode] = ovDec(t, row.Surcharge)
	}
	var yarn struct {
		Data []struct {
			Category  string      `json:"category"`
			TypeCode  string      `json:"type_code"`
			ExtraCost json.Number `json:"extra_cost"`
		} `json:"data"`
	}
	ovDecodeRows(t, c, "/v1/config/yarn-types", &yarn)
	for _, row := range yarn.Data {
		r.yarn[row.Category+"/"+row.TypeCode] = ovDec(t, row.ExtraCost)
	}
	if len(r.base) == 0 || len(r.sides) == 0 || len(r.yarn) == 0 {
		t.Fatalf("empty config tables: %+v", r)
	}
	return r
}

type ovExpected struct {
	subtotal, shipping, discount, grand decimal.Decimal
	lineTotal, lineAddon                []decimal.Decimal
	lineAddonSet                        []bool
}

var ovAddonFees = map[string]decimal.Decimal{
	"fabric_applique":   decimal.RequireFromString("1.50"),
	"lace_applique_emb": decimal.RequireFromString("2.00"),
}

// ovExpect prices a create body by decisions.md "Pricing", from the
// configuration read over HTTP and the catalog's variant prices.
func ovExpect(t *testing.T, body any, rates ovRates, variants map[uuid.UUID]catalogrm.Variant) ovExpected {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	var req struct {
		LabelLink       string `json:"label_link"`
		TrackingNumber  string `json:"tracking_number"`
		ShippingService string `json:"shipping_service"`
		LineItems       []struct {
			VariantID    uuid.UUID         `json:"variant_id"`
			Quantity     int64             `json:"quantity"`
			Sides        map[string]string `json:"sides"`
			YarnType     string            `json:"yarn_type"`
			AddonService string            `json:"addon_service"`
		} `json:"line_items"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		t.Fatal(err)
	}
	service := req.ShippingService
	if service == "" {
		service = "eco"
	}
	var e ovExpected
	e.subtotal = decimal.Zero
	top := -1
	cats := make([]string, len(req.LineItems))
	for i, l := range req.LineItems {
		v, ok := variants[l.VariantID]
		if !ok {
			t.Fatalf("variant %s is not in the test's catalog", l.VariantID)
		}
		cats[i] = v.Category
		unit := decimal.RequireFromString(v.Price)
		for side := range l.Sides {
			if side != "mockup_url" {
				unit = unit.Add(rates.sides[v.Category+"/"+side]) // no row = 0
			}
		}
		if l.YarnType != "" {
			unit = unit.Add(rates.yarn[v.Category+"/"+l.YarnType])
		}
		fee := ovAddonFees[l.AddonService]
		unit = unit.Add(fee)
		q := decimal.NewFromInt(l.Quantity)
		e.lineTotal = append(e.lineTotal, unit.Mul(q).Round(2))
		e.lineAddon = append(e.lineAddon, fee.Mul(q).Round(2))
		e.lineAddonSet = append(e.lineAddonSet, l.AddonService != "")
		e.subtotal = e.subtotal.Add(unit.Mul(q).Round(2))
		if top < 0 || rates.base[v.Category+"/"+service].GreaterThan(rates.base[cats[top]+"/"+service]) {
			top = i
		}
	}
	e.shipping = decimal.Zero
	if req.LabelLink == "" && req.TrackingNumber == "" {
		for i, l := range req.LineItems {
			n := l.Quantity
			if i == top {
				e.shipping = e.shipping.Add(rates.base[cats[i]+"/"+service])
				n--
			}
			e.shipping = e.shipping.Add(rates.additional[cats[i]+"/"+service].Mul(decimal.NewFromInt(n)))
		}
	}
	e.discount = decimal.Zero
	e.grand = e.subtotal.Add(e.shipping).Sub(e.discount)
	return e
}

// ovPricing is the pricing object with its amounts kept exact.
type ovPricing struct {
	Subtotal       json.RawMessage `json:"subtotal"`
	ShippingTotal  json.RawMessage `json:"shipping_total"`
	DiscountAmount json.RawMessage `json:"discount_amount"`
	GrandTotal     json.RawMessage `json:"grand_total"`
}

// ovAmount reads a JSON number (a quoted string is an error: amounts are numbers).
func ovAmount(t *testing.T, what string, raw json.RawMessage) decimal.Decimal {
	t.Helper()
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" || s[0] == '"' {
		t.Fatalf("%s is not a JSON number: %s", what, raw)
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return d
}

func ovCheckPricing(t *testing.T, where string, got ovPricing, want ovExpected) {
	t.Helper()
	for _, c := range []struct {
		name string
		raw  json.RawMessage
		want decimal.Decimal
	}{
		{"subtotal", got.Subtotal, want.subtotal}, {"shipping_total", got.ShippingTotal, want.shipping},
		{"discount_amount", got.DiscountAmount, want.discount}, {"grand_total", got.GrandTotal, want.grand},
	} {
		if a := ovAmount(t, where+" "+c.name, c.raw); !a.Equal(c.want) {
			t.Errorf("%s: %s = %s, want %s", where, c.name, a, c.want.StringFixed(2))
		}
	}
}

// ovDetail is the order detail with exact amounts.
type ovDetail struct {
	OrderID         uuid.UUID       `json:"order_id"`
	ReferenceID     string          `json:"reference_id"`
	Status          string          `json:"status"`
	AddonService    []string        `json:"addon_service"`
	Pricing         ovPricing       `json:"pricing"`
	Customer        map[string]any  `json:"customer"`
	ShippingAddress json.RawMessage `json:"shipping_address"`
	LabelLink       *string         `json:"label_link"`
	TrackingNumber  *string         `json:"tracking_number"`
	ShippingService string          `json:"shipping_service"`
	LineItems       []struct {
		VariantID          uuid.UUID         `json:"variant_id"`
		Quantity           int               `json:"quantity"`
		Sides              map[string]string `json:"sides"`
		LineTotal          json.RawMessage   `json:"line_total"`
		LineAddonSurcharge json.RawMessage   `json:"line_addon_surcharge"`
		AddonService       *string           `json:"addon_service"`
		PrintingTechnique  *string           `json:"printing_technique"`
		YarnType           *string           `json:"yarn_type"`
	} `json:"line_items"`
}

func ovGetDetail(t *testing.T, c *testenv.Client, id uuid.UUID) ovDetail {
	t.Helper()
	r := c.Get("/v1/orders/pod/" + id.String())
	if r.Status != 200 {
		t.Fatalf("GET order %s: %d %s", id, r.Status, r.Body)
	}
	var o ovDetail
	r.JSON(t, &o)
	return o
}

// ovCheckDetail compares the stored order with the expected prices, line by line.
func ovCheckDetail(t *testing.T, o ovDetail, want ovExpected) {
	t.Helper()
	ovCheckPricing(t, "detail", o.Pricing, want)
	if len(o.LineItems) != len(want.lineTotal) {
		t.Fatalf("detail has %d lines, want %d", len(o.LineItems), len(want.lineTotal))
	}
	for i, l := range o.LineItems {
		if got := ovAmount(t, fmt.Sprintf("line_items[%d].line_total", i), l.LineTotal); !got.Equal(want.lineTotal[i]) {
			t.Errorf("line_items[%d].line_total = %s, want %s", i, got, want.lineTotal[i].StringFixed(2))
		}
		if want.lineAddonSet[i] {
			if got := ovAmount(t, fmt.Sprintf("line_items[%d].line_addon_surcharge", i), l.LineAddonSurcharge); !got.Equal(want.lineAddon[i]) {
				t.Errorf("line_items[%d].line_addon_surcharge = %s, want %s", i, got, want.lineAddon[i].StringFixed(2))
			}
		} else if s := strings.TrimSpace(string(l.LineAddonSurcharge)); s != "" && s != "null" {
			// No add-on: null (nullable field) or zero.
			if ovAmount(t, "line_addon_surcharge", l.LineAddonSurcharge).Sign() != 0 {
				t.Errorf("line_items[%d] has no add-on but line_addon_surcharge %s", i, s)
			}
		}
	}
}

type ovCreated struct {
	orderrm.Order
	Pricing ovPricing `json:"pricing"`
}

func TestCreateOrderValidationOverHTTP(t *testing.T) {
	d := startDemo(t, noPusher)
	c := d.client
	cat := ovLoadCatalog(t, d)
	rates := ovLoadRates(t, c)

	// Another account with its own catalog: its variant is absent for the demo account.
	otherAccount, otherToken := d.newAccount(t, "validation-other-"+testenv.RandomSuffix())
	f, err := catalog.Parse(strings.NewReader(`{"stores":[{"name":"Elsewhere","shop_domain":"elsewhere-validation.myshopify.com",
		"status":"ACTIVE","products":[{"title":"Elsewhere Tee","status":"ACTIVE","variants":[{"title":"M","sku":"EW-TEE-M",
		"price":"10.00","category":"tshirt","requires_yarn_type":[]}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	importAndWait(t, d, otherAccount, f)
	oc := testenv.NewClient(t, c.Base, otherToken)
	var otherStores struct{ Data []catalogrm.Store }
	oc.Get("/v1/stores").JSON(t, &otherStores)
	if len(otherStores.Data) != 1 {
		t.Fatalf("other account stores: %+v", otherStores.Data)
	}
	var otherProducts struct{ Data []catalogrm.Product }
	oc.Get("/v1/stores/"+otherStores.Data[0].StoreID.String()+"/products").JSON(t, &otherProducts)
	if len(otherProducts.Data) != 1 || len(otherProducts.Data[0].Variants) != 1 {
		t.Fatalf("other account products: %+v", otherProducts.Data)
	}
	foreign := otherProducts.Data[0].Variants[0]

	created := map[uuid.UUID]bool{} // every order a 201 answered

	label := func(kv ...any) []any {
		return append([]any{"shipping_address", ovAbsent{}, "label_link", "https://labels.example.com/l.pdf",
			"tracking_number", "1Z999AA10123456784"}, kv...)
	}
	photo := func(v catalogrm.Variant, pets any, kv ...any) map[string]any {
		return ovLine(v, append([]any{"emb_file", "No EMB file", "design_emb_type", "Photo to Embroidery", "number_of_pets", pets}, kv...)...)
	}
	tee := cat.tee
	var lines101 []map[string]any
	for range 101 {
		lines101 = append(lines101, ovLine(tee))
	}
	longURL := "https://img.example.com/" + strings.Repeat("a", 2049-len("https://img.example.com/"))
	badURLMsg := func(p, side string) string {
		return p + ".sides." + side + " must be an image URL starting with http:// or https:// (at most 2048 characters)"
	}

	t.Run("rejected", func(t *testing.T) {
		cases := []struct {
			name  string
			body  any    // map, or raw []byte
			field string // details.field; "" = no field
			msg   string // exact message
		}{
			// Decoding: malformed JSON, wrong types, unknown fields.
			{"malformed JSON", []byte(`{"reference_id": `), "", "request body must be a JSON object"},
			{"trailing garbage", []byte(`{"reference_id": "x"} {}`), "", "request body must be a JSON object"},
			{"body is an array", []byte(`[{"reference_id": "x"}]`), "", "request body must be a JSON object"},
			{"body is null", []byte(`null`), "", "request body must be a JSON object"},
			{"empty body", []byte(``), "", "request body must be a JSON object"},
			{"quantity is a string", ovOrder(ovLines(ovLine(tee, "quantity", "two"))), "line_items[0].quantity", "line_items[0].quantity must be a whole number"},
			{"quantity is a fraction", ovOrder(ovLines(ovLine(tee), ovLine(tee, "quantity", 1.5))), "line_items[1].quantity", "line_items[1].quantity must be a whole number"},
			{"number_of_pets is a string", ovOrder(ovLines(photo(tee, "two"))), "line_items[0].number_of_pets", "line_items[0].number_of_pets must be a whole number"},
			{"sides is an array", ovOrder(ovLines(ovLine(tee, "sides", []string{"https://img.example.com/a.png"}))), "line_items[0].sides", "line_items[0].sides must be an object"},
			{"reference_id is a number", ovOrder(ovLines(ovLine(tee)), "reference_id", 42), "reference_id", "reference_id must be a string"},
			{"customer is a string", ovOrder(ovLines(ovLine(tee)), "customer", "Grace"), "customer", "customer must be an object"},
			{"customer.email is a number", ovOrder(ovLines(ovLine(tee)), "customer", map[string]any{"email": 7, "first_name": "G", "last_name": "H"}), "customer.email", "customer.email must be a string"},
			{"force is a string", ovOrder(ovLines(ovLine(tee)), "force", "yes"), "force", "force must be true or false"},
			{"line_items is an object", ovOrder(nil, "line_items", map[string]any{}), "line_items", "line_items must be an array of line items"},
			{"line item is a number", ovOrder(nil, "line_items", []any{5}), "line_items[0]", "line_items[0] must be an object"},
			{"variant_id is not a uuid", ovOrder(ovLines(ovLine(tee, "variant_id", "v-1"))), "line_items[0].variant_id", "line_items[0].variant_id must be a UUID string"},
			{"variant_id is missing", ovOrder(ovLines(ovLine(tee, "variant_id", ovAbsent{}))), "line_items[0].variant_id", "line_items[0].variant_id is required"},
			{"unknown top-level field", ovOrder(ovLines(ovLine(tee)), "colour", "red"), "colour", "unknown field colour"},
			{"unknown line field", ovOrder(ovLines(ovLine(tee), ovLine(tee, "size", "M"))), "line_items[1].size", "unknown field line_items[1].size"},
			{"unknown customer field", ovOrder(ovLines(ovLine(tee)), "customer", ovWith(ovCustomer(), "nickname", "amazing")), "customer.nickname", "unknown field customer.nickname"},
			{"unknown address field", ovOrder(ovLines(ovLine(tee)), "shipping_address", ovWith(ovAddress(), "county", "Multnomah")), "shipping_address.county", "unknown field shipping_address.county"},
			{"order addon_service is a number", ovOrder(ovLines(ovLine(tee)), "addon_service", 3), "addon_service", "addon_service must be an array of strings"},

			// Reference, customer, address, label.
			{"reference_id too long", ovOrder(ovLines(ovLine(tee)), "reference_id", strings.Repeat("r", 101)), "reference_id", "reference_id must be at most 100 characters"},
			{"customer missing", ovOrder(ovLines(ovLine(tee)), "customer", ovAbsent{}), "customer", "customer is required"},
			{"customer email missing", ovOrder(ovLines(ovLine(tee)), "customer", ovWith(ovCustomer(), "email", ovAbsent{})), "customer.email", "customer.email is required"},
			{"customer email invalid", ovOrder(ovLines(ovLine(tee)), "customer", ovWith(ovCustomer(), "email", "grace-at-example")), "customer.email", "customer.email is not a valid email address"},
			{"customer last_name missing", ovOrder(ovLines(ovLine(tee)), "customer", ovWith(ovCustomer(), "last_name", " ")), "customer.last_name", "customer.last_name is required"},
			{"neither address nor label", ovOrder(ovLines(ovLine(tee)), "shipping_address", ovAbsent{}), "shipping_address",
				"shipping_address is required for standard orders; label orders send label_link and tracking_number instead"},
			{"address null and no label", ovOrder(ovLines(ovLine(tee)), "shipping_address", nil), "shipping_address",
				"shipping_address is required for standard orders; label orders send label_link and tracking_number instead"},
			{"address and label", ovOrder(ovLines(ovLine(tee)), "label_link", "https://labels.example.com/l.pdf", "tracking_number", "1Z999"),
				"shipping_address", "shipping_address must not be provided for label orders"},
			{"address and label_link only", ovOrder(ovLines(ovLine(tee)), "label_link", "https://labels.example.com/l.pdf"),
				"shipping_address", "shipping_address must not be provided for label orders"},
			{"label_link without tracking_number", ovOrder(ovLines(ovLine(tee)), label("tracking_number", ovAbsent{})...),
				"tracking_number", "label_link and tracking_number must both be provided"},
			{"tracking_number without label_link", ovOrder(ovLines(ovLine(tee)), label("label_link", ovAbsent{})...),
				"label_link", "label_link and tracking_number must both be provided"},
			{"label_link not http", ovOrder(ovLines(ovLine(tee)), label("label_link", "ftp://labels.example.com/l.pdf")...),
				"label_link", "label_link must be an http(s) URL of the label file"},
			{"address1 missing", ovOrder(ovLines(ovLine(tee)), "shipping_address", ovWith(ovAddress(), "address1", ovAbsent{})), "shipping_address.address1", "shipping_address.address1 is required"},
			{"zip missing", ovOrder(ovLines(ovLine(tee)), "shipping_address", ovWith(ovAddress(), "zip", "")), "shipping_address.zip", "shipping_address.zip is required"},
			{"unknown country code", ovOrder(ovLines(ovLine(tee)), "shipping_address", ovWith(ovAddress(), "country_code", "XX")),
				"shipping_address.country_code", `shipping_address.country_code "XX" is not a valid country code`},
			{"three-letter country code", ovOrder(ovLines(ovLine(tee)), "shipping_address", ovWith(ovAddress(), "country_code", "USA")),
				"shipping_address.country_code", `shipping_address.country_code "USA" is not a valid country code`},
			{"unknown shipping_service", ovOrder(ovLines(ovLine(tee)), "shipping_service", "express"), "shipping_service", "shipping_service must be eco or premium"},
			{"unknown order addon", ovOrder(ovLines(ovLine(tee)), "addon_service", []string{"carton_box", "gift_wrap"}), "addon_service[1]", "addon_service values must be carton_box or scan_label"},
			{"unknown order addon, old string form", ovOrder(ovLines(ovLine(tee)), "addon_service", "gift_wrap"), "addon_service[0]", "addon_service values must be carton_box or scan_label"},

			// Lines: count, quantity, sides.
			{"no line items", ovOrder(nil, "line_items", []any{}), "line_items", "line_items must contain at least one line item"},
			{"line_items missing", ovOrder(nil, "line_items", ovAbsent{}), "line_items", "line_items must contain at least one line item"},
			{"101 line items", ovOrder(lines101), "line_items", "line_items may contain at most 100 line items"},
			{"quantity 0", ovOrder(ovLines(ovLine(tee, "quantity", 0))), "line_items[0].quantity", "line_items[0].quantity must be from 1 to 1000"},
			{"quantity missing", ovOrder(ovLines(ovLine(tee, "quantity", ovAbsent{}))), "line_items[0].quantity", "line_items[0].quantity must be from 1 to 1000"},
			{"quantity 1001", ovOrder(ovLines(ovLine(tee), ovLine(tee), ovLine(tee, "quantity", 1001))), "line_items[2].quantity", "line_items[2].quantity must be from 1 to 1000"},
			{"quantity negative", ovOrder(ovLines(ovLine(tee, "quantity", -3))), "line_items[0].quantity", "line_items[0].quantity must be from 1 to 1000"},
			{"sides empty", ovOrder(ovLines(ovLine(tee, "sides", map[string]any{}))), "line_items[0].sides", "At least one side design is required"},
			{"sides missing", ovOrder(ovLines(ovLine(tee, "sides", ovAbsent{}))), "line_items[0].sides", "At least one side design is required"},
			{"mockup_url is the only side", ovOrder(ovLines(ovLine(tee, "sides", map[string]any{"mockup_url": "https://img.example.com/m.png"}))),
				"line_items[0].sides", "At least one side design is required"},
			{"invalid side code", ovOrder(ovLines(ovLine(tee, "sides", map[string]any{"front_side": "https://img.example.com/f.png", "chest": "https://img.example.com/c.png"}))),
				"line_items[0].sides.chest", "Invalid side code"},
			{"side URL not http", ovOrder(ovLines(ovLine(tee, "sides", map[string]any{"back": "ftp://img.example.com/b.png"}))),
				"line_items[0].sides.back", badURLMsg("line_items[0]", "back")},
			{"side URL without scheme", ovOrder(ovLines(ovLine(tee, "sides", map[string]any{"front_side": "img.example.com/b.png"}))),
				"line_items[0].sides.front_side", badURLMsg("line_items[0]", "front_side")},
			{"side URL javascript", ovOrder(ovLines(ovLine(tee), ovLine(tee, "sides", map[string]any{"front_large": "javascript:alert(1)"}))),
				"line_items[1].sides.front_large", badURLMsg("line_items[1]", "front_large")},
			{"side URL over 2048 chars", ovOrder(ovLines(ovLine(tee, "sides", map[string]any{"front_side": longURL}))),
				"line_items[0].sides.front_side", badURLMsg("line_items[0]", "front_side")},
			{"mockup URL not http", ovOrder(ovLines(ovLine(tee, "sides", map[string]any{"front_side": "https://img.example.com/f.png", "mockup_url": "file:///m.png"}))),
				"line_items[0].sides.mockup_url", badURLMsg("line_items[0]", "mockup_url")},

			// Technique and embroidery.
			{"printing_technique and emb_file", ovOrder(ovLines(ovLine(tee, "printing_technique", "DTG", "emb_file", "Available"))),
				"line_items[0].emb_file", "a line uses printing_technique or emb_file, never both"},
			{"unknown printing_technique", ovOrder(ovLines(ovLine(tee, "printing_technique", "SCREEN"))),
				"line_items[0].printing_technique", "line_items[0].printing_technique must be DTG or DTF"},
			{"unknown emb_file", ovOrder(ovLines(ovLine(tee, "emb_file", "Maybe"))), "line_items[0].emb_file", "line_items[0].emb_file must be 'Available' or 'No EMB file'"},
			{"No EMB file without design_emb_type", ovOrder(ovLines(ovLine(tee, "emb_file", "No EMB file"))),
				"line_items[0].design_emb_type", "line_items[0].design_emb_type is required when emb_file is 'No EMB file'"},
			{"unknown design_emb_type", ovOrder(ovLines(ovLine(tee, "emb_file", "No EMB file", "design_emb_type", "watercolour"))),
				"line_items[0].design_emb_type", "line_items[0].design_emb_type must be 'text only', 'vector / cartoon artwork' or 'Photo to Embroidery'"},
			{"Photo to Embroidery without number_of_pets", ovOrder(ovLines(photo(tee, ovAbsent{}))),
				"line_items[0].number_of_pets", "line_items[0].number_of_pets is required when design_emb_type is 'Photo to Embroidery'"},
			{"number_of_pets 5", ovOrder(ovLines(photo(tee, 5))), "line_items[0].number_of_pets", "line_items[0].number_of_pets must be from 1 to 4 for tshirt"},
			{"number_of_pets 5 on a hoodie", ovOrder(ovLines(photo(cat.zipHoodie, 5, "yarn_type", "yarn_6_7mm"))), "line_items[0].number_of_pets", "line_items[0].number_of_pets must be from 1 to 4 for hoodie"},
			{"number_of_pets 0", ovOrder(ovLines(photo(tee, 0))), "line_items[0].number_of_pets", "line_items[0].number_of_pets must be from 1 to 4 for tshirt"},
			{"number_of_pets 3 on a cap", ovOrder(ovLines(ovLine(tee), photo(cat.cap, 3, "yarn_type", "plat_emb"))),
				"line_items[1].number_of_pets", "line_items[1].number_of_pets must be from 1 to 2 for cap"},
			{"number_of_pets 3 on a hat", ovOrder(ovLines(photo(cat.hat, 3, "yarn_type", "plat_emb"))),
				"line_items[0].number_of_pets", "line_items[0].number_of_pets must be from 1 to 2 for hat"},
			{"number_of_pets with text only", ovOrder(ovLines(ovLine(tee, "emb_file", "No EMB file", "design_emb_type", "text only", "number_of_pets", 1))),
				"line_items[0].number_of_pets", "number_of_pets applies only to 'Photo to Embroidery'"},
			{"emb_file Available with design_emb_type", ovOrder(ovLines(ovLine(tee, "emb_file", "Available", "design_emb_type", "text only"))),
				"line_items[0].design_emb_type", "emb_file 'Available' needs no other embroidery field"},
			{"design_emb_type without emb_file", ovOrder(ovLines(ovLine(tee, "design_emb_type", "text only"))),
				"line_items[0].design_emb_type", "design_emb_type and number_of_pets apply only to embroidery lines (emb_file 'No EMB file')"},

			// Line add-ons.
			{"unknown line addon", ovOrder(ovLines(ovLine(tee, "addon_service", "glitter"))), "line_items[0].addon_service", "line_items[0].addon_service must be fabric_applique or lace_applique_emb"},
			{"addon on a tote", ovOrder(ovLines(ovLine(cat.tote, "addon_service", "fabric_applique"))),
				"line_items[0].addon_service", "addon_service fabric_applique is not available for this product (tote)"},
			{"addon on a cap", ovOrder(ovLines(ovLine(cat.cap, "yarn_type", "plat_emb", "addon_service", "lace_applique_emb"))),
				"line_items[0].addon_service", "addon_service lace_applique_emb is not available for this product (cap)"},
			{"addon on a hat", ovOrder(ovLines(ovLine(cat.hat, "yarn_type", "plat_emb", "addon_service", "fabric_applique"))),
				"line_items[0].addon_service", "addon_service fabric_applique is not available for this product (hat)"},
			{"addon on a yarn product", ovOrder(ovLines(ovLine(cat.zipHoodie, "yarn_type", "yarn_20mm", "addon_service", "fabric_applique"))),
				"line_items[0].addon_service", "addon_service fabric_applique is not available for this product (hoodie)"},

			// Yarn.
			{"yarn_type missing", ovOrder(ovLines(ovLine(cat.zipHoodie))), "line_items[0].yarn_type", "yarn_type is required for this product"},
			{"yarn_type missing on a cap", ovOrder(ovLines(ovLine(tee), ovLine(cat.cap))), "line_items[1].yarn_type", "yarn_type is required for this product"},
			{"yarn_type on a tee", ovOrder(ovLines(ovLine(tee, "yarn_type", "yarn_20mm"))), "line_items[0].yarn_type", "yarn_type is not allowed for this product"},
			{"yarn_type on a tote", ovOrder(ovLines(ovLine(cat.tote, "yarn_type", "plat_emb"))), "line_items[0].yarn_type", "yarn_type is not allowed for this product"},
			{"yarn_type not in the variant's list", ovOrder(ovLines(ovLine(cat.sweatYarn, "yarn_type", "yarn_6_7mm"))),
				"line_items[0].yarn_type", `yarn_type "yarn_6_7mm" not allowed for sweatshirt`},
			{"hoodie yarn on a cap", ovOrder(ovLines(ovLine(cat.cap, "yarn_type", "yarn_20mm"))), "line_items[0].yarn_type", `yarn_type "yarn_20mm" not allowed for cap`},
			{"cap yarn on a hoodie", ovOrder(ovLines(ovLine(cat.zipHoodie, "yarn_type", "emb_3d_puff"))), "line_items[0].yarn_type", `yarn_type "emb_3d_puff" not allowed for hoodie`},
			{"unknown yarn_type", ovOrder(ovLines(ovLine(cat.zipHoodie, "yarn_type", "wool"))), "line_items[0].yarn_type", `yarn_type "wool" not allowed for hoodie`},

			// Variants and stores.
			{"variant does not exist", ovOrder(ovLines(ovLine(tee), ovLine(tee, "variant_id", uuid.New()))), "line_items[1].variant_id", "variant_id not found"},
			{"variant of another account", ovOrder(ovLines(ovLine(foreign))), "line_items[0].variant_id", "variant_id not found"},
			{"variant of another account after an own one", ovOrder(ovLines(ovLine(tee), ovLine(foreign))), "line_items[1].variant_id", "variant_id not found"},
			{"ARCHIVED product", ovOrder(ovLines(ovLine(cat.archived))), "line_items[0].variant_id", "variant is not available"},
			{"DRAFT product", ovOrder(ovLines(ovLine(tee), ovLine(cat.draft))), "line_items[1].variant_id", "variant is not available"},
			{"lines from two stores", ovOrder(ovLines(ovLine(tee), ovLine(cat.credTee))), "line_items[1].variant_id", "line items must belong to one store"},
			{"lines from two stores, other order", ovOrder(ovLines(ovLine(cat.credTee), ovLine(cat.credTee), ovLine(tee))), "line_items[2].variant_id", "line items must belong to one store"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := c.Do("POST", "/v1/orders/pod", tc.body)
				if r.Status != 400 {
					t.Fatalf("status %d, want 400: %s", r.Status, r.Body)
				}
				e := r.Err(t)
				if e.Error != schemas.CodeValidation {
					t.Errorf("error %q, want %s", e.Error, schemas.CodeValidation)
				}
				if e.Message != tc.msg {
					t.Errorf("message\n got %q\nwant %q", e.Message, tc.msg)
				}
				field, hasField := e.Details["field"]
				switch {
				case tc.field == "" && hasField:
					t.Errorf("details.field %v, want none", field)
				case tc.field != "" && field != tc.field:
					t.Errorf("details.field %v, want %q", field, tc.field)
				}
				if bytes.Contains(r.Body, []byte(`"order_id"`)) {
					t.Errorf("a rejected create carries an order: %s", r.Body)
				}
			})
		}
	})

	// The interface's error table, word for word.
	t.Run("interface messages", func(t *testing.T) {
		for _, m := range []struct {
			body any
			want string
		}{
			{ovOrder(ovLines(ovLine(tee)), "shipping_address", ovAbsent{}), "shipping_address is required"},
			{ovOrder(ovLines(ovLine(tee)), "label_link", "https://l.example.com/x.pdf", "tracking_number", "1Z"), "shipping_address must not be provided for label orders"},
			{ovOrder(ovLines(ovLine(tee)), label("tracking_number", ovAbsent{})...), "label_link and tracking_number must both be provided"},
			{ovOrder(ovLines(ovLine(cat.zipHoodie))), "yarn_type is required for this product"},
			{ovOrder(ovLines(ovLine(tee, "yarn_type", "plat_emb"))), "yarn_type is not allowed for this product"},
			{ovOrder(ovLines(ovLine(cat.cap, "yarn_type", "X"))), `yarn_type "X" not allowed for cap`},
			{ovOrder(ovLines(ovLine(tee, "sides", map[string]any{}))), "At least one side design is required"},
			{ovOrder(ovLines(ovLine(tee, "sides", map[string]any{"sleeve": "https://i.example.com/s.png"}))), "Invalid side code"},
			{ovOrder(ovLines(ovLine(tee, "variant_id", uuid.New()))), "variant_id not found"},
			{ovOrder(ovLines(ovLine(tee), ovLine(cat.credTee))), "line items must belong to one store"},
			{ovOrder(ovLines(ovLine(cat.archived))), "variant is not available"},
		} {
			r := c.Do("POST", "/v1/orders/pod", m.body)
			if r.Status != 400 {
				t.Errorf("%q: %d %s", m.want, r.Status, r.Body)
				continue
			}
			e := r.Err(t)
			ok := e.Message == m.want
			if m.want == "shipping_address is required" {
				ok = strings.HasPrefix(e.Message, m.want)
			}
			if !ok || e.Error != schemas.CodeValidation {
				t.Errorf("want %q, got %s %q", m.want, e.Error, e.Message)
			}
		}
	})

	post := func(t *testing.T, body any) (ovCreated, testenv.Response) {
		t.Helper()
		r := c.Do("POST", "/v1/orders/pod", body)
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		var o ovCreated
		r.JSON(t, &o)
		if o.OrderID == uuid.Nil || created[o.OrderID] {
			t.Fatalf("create answered order id %s (new: %v): %s", o.OrderID, !created[o.OrderID], r.Body)
		}
		created[o.OrderID] = true
		return o, r
	}

	t.Run("accepted", func(t *testing.T) {
		okURL := "https://img.example.com/" + strings.Repeat("b", 2048-len("https://img.example.com/"))
		var lines100 []map[string]any
		for range 100 {
			lines100 = append(lines100, ovLine(tee))
		}
		cases := []struct {
			name  string
			body  map[string]any
			check func(t *testing.T, o ovCreated, raw []byte, det ovDetail)
		}{
			{"label order", ovOrder(ovLines(ovLine(tee, "quantity", 2)), label("reference_id", "val-label")...),
				func(t *testing.T, o ovCreated, raw []byte, det ovDetail) {
					if sh := ovAmount(t, "shipping_total", o.Pricing.ShippingTotal); sh.Sign() != 0 {
						t.Errorf("label order shipping_total %s, want 0", sh)
					}
					if det.LabelLink == nil || *det.LabelLink != "https://labels.example.com/l.pdf" ||
						det.TrackingNumber == nil || *det.TrackingNumber != "1Z999AA10123456784" {
						t.Errorf("label fields: %v %v", det.LabelLink, det.TrackingNumber)
					}
					if s := strings.TrimSpace(string(det.ShippingAddress)); s != "null" && s != "" {
						t.Errorf("label order has a shipping_address: %s", s)
					}
				}},
			{"label order with shipping_address null", ovOrder(ovLines(ovLine(tee)), label("reference_id", "val-label-2", "shipping_address", nil)...), nil},
			{"phone absent", ovOrder(ovLines(ovLine(tee)), "reference_id", "val-no-phone"),
				func(t *testing.T, o ovCreated, raw []byte, det ovDetail) {
					if p, ok := det.Customer["phone"]; ok && p != nil && p != "" {
						t.Errorf("phone %v", p)
					}
				}},
			{"phone given", ovOrder(ovLines(ovLine(tee)), "reference_id", "val-phone", "customer", ovWith(ovCustomer(), "phone", "+1 503 555 0100")),
				func(t *testing.T, o ovCreated, raw []byte, det ovDetail) {
					if det.Customer["phone"] != "+1 503 555 0100" {
						t.Errorf("phone %v", det.Customer["phone"])
					}
				}},
			{"reference_id absent", ovOrder(ovLines(ovLine(tee))),
				func(t *testing.T, o ovCreated, raw []byte, det ovDetail) {
					if strings.TrimSpace(o.ReferenceID) == "" || det.ReferenceID != o.ReferenceID {
						t.Errorf("generated reference_id %q, detail %q", o.ReferenceID, det.ReferenceID)
					}
				}},
			{"second order without reference_id", ovOrder(ovLines(ovLine(tee))), nil},
			{"order addon_service, older single string", ovOrder(ovLines(ovLine(tee)), "reference_id", "val-addon-str", "addon_service", "carton_box"),
				func(t *testing.T, o ovCreated, raw []byte, det ovDetail) {
					if !bytes.Contains(raw, []byte(`"addon_service":["carton_box"]`)) || !slices.Equal(det.AddonService, []string{"carton_box"}) {
						t.Errorf("addon_service not normalised to an array: %s / %v", raw, det.AddonService)
					}
				}},
			{"order addon_service null", ovOrder(ovLines(ovLine(tee)), "reference_id", "val-addon-null", "addon_service", nil),
				func(t *testing.T, o ovCreated, raw []byte, det ovDetail) {
					if !bytes.Contains(raw, []byte(`"addon_service":[]`)) || det.AddonService == nil || len(det.AddonService) != 0 {
						t.Errorf("null addon_service: %s / %v", raw, det.AddonService)
					}
				}},
			{"order addon_service array", ovOrder(ovLines(ovLine(tee)), "reference_id", "val-addon-arr", "addon_service", []string{"scan_label", "carton_box"}),
				func(t *testing.T, o ovCreated, raw []byte, det ovDetail) {
					got := slices.Clone(o.AddonService)
					slices.Sort(got)
					if !slices.Equal(got, []string{"carton_box", "scan_label"}) {
						t.Errorf("addon_service %v", o.AddonService)
					}
				}},
			{"no technique means DTG", ovOrder(ovLines(ovLine(tee)), "reference_id", "val-dtg"),
				func(t *testing.T, o ovCreated, raw []byte, det ovDetail) {
					if pt := det.LineItems[0].PrintingTechnique; pt == nil || *pt != "DTG" {
						t.Errorf("printing_technique %v, want DTG", pt)
					}
				}},
			{"lowercase country code", ovOrder(ovLines(ovLine(tee)), "reference_id", "val-cc", "shipping_address", ovWith(ovAddress(), "country_code", "us")), nil},
			{"side URL of 2048 chars", ovOrder(ovLines(ovLine(tee, "sides", map[string]any{"front_side": okURL})), "reference_id", "val-url-2048"), nil},
			{"quantity 1000", ovOrder(ovLines(ovLine(tee, "quantity", 1000)), "reference_id", "val-q1000"), nil},
			{"100 line items", ovOrder(lines100, "reference_id", "val-100-lines"), nil},
			{"number_of_pets 2 on a cap", ovOrder(ovLines(photo(cat.cap, 2, "yarn_type", "plat_emb")), "reference_id", "val-cap-pets"), nil},
			{"number_of_pets 4 on a hoodie", ovOrder(ovLines(photo(cat.zipHoodie, 4, "yarn_type", "yarn_8_10mm")), "reference_id", "val-hoodie-pets", "shipping_service", "premium"), nil},
			{"emb_file Available alone", ovOrder(ovLines(ovLine(cat.sweatYarn, "emb_file", "Available", "yarn_type", "yarn_8_10mm")), "reference_id", "val-emb"), nil},
			{"addon on a tee", ovOrder(ovLines(ovLine(tee, "addon_service", "fabric_applique", "quantity", 3)), "reference_id", "val-tee-addon"), nil},
			{"mockup beside a print side", ovOrder(ovLines(ovLine(tee, "sides", map[string]any{"back": ovImg(), "mockup_url": ovImg()})), "reference_id", "val-mockup"), nil},
			{"order in the CREDENTIAL_ERROR store", ovOrder(ovLines(ovLine(cat.credTee), ovLine(cat.credTee, "quantity", 2)), "reference_id", "val-cred"), nil},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				want := ovExpect(t, tc.body, rates, cat.byID)
				o, r := post(t, tc.body)
				if o.Status != "PENDING" || o.CreatedVia != "api" {
					t.Errorf("created order: %s", r.Body)
				}
				if ref, ok := tc.body["reference_id"].(string); ok && o.ReferenceID != ref {
					t.Errorf("reference_id %q, want %q", o.ReferenceID, ref)
				}
				ovCheckPricing(t, "create response", o.Pricing, want)
				det := ovGetDetail(t, c, o.OrderID)
				ovCheckDetail(t, det, want)
				if tc.check != nil {
					tc.check(t, o, r.Body, det)
				}
			})
		}
	})

	t.Run("failed creates reserve nothing", func(t *testing.T) {
		bad := ovOrder(ovLines(ovLine(tee, "quantity", 0)), "reference_id", "val-reuse")
		if r := c.Do("POST", "/v1/orders/pod", bad); r.Status != 400 {
			t.Fatalf("bad create: %d %s", r.Status, r.Body)
		}
		o, _ := post(t, ovOrder(ovLines(ovLine(tee)), "reference_id", "val-reuse"))
		if o.ReferenceID != "val-reuse" {
			t.Fatalf("reference %q", o.ReferenceID)
		}
	})

	t.Run("duplicate reference_id", func(t *testing.T) {
		firstBody := ovOrder(ovLines(ovLine(tee)), "reference_id", "val-dup")
		first, _ := post(t, firstBody)
		for _, body := range []map[string]any{
			firstBody, // the same request again
			ovWith(ovOrder(ovLines(ovLine(tee)), "reference_id", "val-dup"), "line_items", firstBody["line_items"], "force", true),
			ovOrder(ovLines(ovLine(cat.teeB, "quantity", 4)), "reference_id", "val-dup", "note", "different content"),
			ovOrder(ovLines(ovLine(tee)), "reference_id", "val-dup", "force", true),
		} {
			r := c.Do("POST", "/v1/orders/pod", body)
			if r.Status != 409 {
				t.Fatalf("second create with reference val-dup: %d %s", r.Status, r.Body)
			}
			if e := r.Err(t); e.Error != schemas.CodeDuplicateReference {
				t.Fatalf("error %s: %s", e.Error, r.Body)
			}
			var fields map[string]json.RawMessage
			r.JSON(t, &fields)
			for k := range fields {
				if k != "error" && k != "message" && k != "details" {
					t.Errorf("409 body has field %q: %s", k, r.Body)
				}
			}
			for _, f := range []string{"order_id", "status", "pricing", "reference_id\":", "created_at"} {
				if bytes.Contains(r.Body, []byte(`"`+f)) {
					t.Errorf("409 body carries order field %s: %s", f, r.Body)
				}
			}
		}
		// The first order is unchanged.
		det := ovGetDetail(t, c, first.OrderID)
		if len(det.LineItems) != 1 || det.LineItems[0].VariantID != tee.VariantID || det.LineItems[0].Quantity != 1 {
			t.Fatalf("first order changed: %+v", det.LineItems)
		}
		// The same reference in another store is another order.
		post(t, ovOrder(ovLines(ovLine(cat.credTee)), "reference_id", "val-dup"))
	})

	t.Run("pricing of a multi-line order", func(t *testing.T) {
		body := ovOrder(ovLines(
			ovLine(cat.zipHoodie, "quantity", 2, "emb_file", "Available", "yarn_type", "yarn_20mm",
				"sides", map[string]any{"front_side": ovImg(), "back": ovImg(), "mockup_url": ovImg()}),
			ovLine(tee, "quantity", 3, "printing_technique", "DTF", "addon_service", "lace_applique_emb",
				"sides", map[string]any{"front_large": ovImg(), "left_sleeve": ovImg()}),
			photo(cat.cap, 2, "yarn_type", "emb_3d_puff"),
			ovLine(cat.teeB, "addon_service", "fabric_applique",
				"sides", map[string]any{"pocket_chest_left": ovImg(), "special_location": ovImg()}),
			ovLine(cat.tote, "quantity", 4, "sides", map[string]any{"front_side": ovImg(), "back": ovImg()}),
		), "reference_id", "val-pricing", "shipping_service", "premium", "addon_service", []string{"carton_box"})
		want := ovExpect(t, body, rates, cat.byID)

		// Spell the expectation out once from the tables, independently of
		// ovExpect's loop: zip hoodie x2, tee x3, cap x1, other tee x1, tote x4.
		p := func(v catalogrm.Variant) decimal.Decimal { return decimal.RequireFromString(v.Price) }
		s := func(cat, side string) decimal.Decimal { return rates.sides[cat+"/"+side] }
		units := []decimal.Decimal{
			p(cat.zipHoodie).Add(s("hoodie", "front_side")).Add(s("hoodie", "back")).Add(rates.yarn["hoodie/yarn_20mm"]),
			p(tee).Add(s("tshirt", "front_large")).Add(s("tshirt", "left_sleeve")).Add(decimal.RequireFromString("2.00")),
			p(cat.cap).Add(s("cap", "front_side")).Add(rates.yarn["cap/emb_3d_puff"]),
			p(cat.teeB).Add(s("tshirt", "pocket_chest_left")).Add(s("tshirt", "special_location")).Add(decimal.RequireFromString("1.50")),
			p(cat.tote).Add(s("tote", "front_side")).Add(s("tote", "back")),
		}
		qty := []int64{2, 3, 1, 1, 4}
		sub := decimal.Zero
		for i, u := range units {
			lt := u.Mul(decimal.NewFromInt(qty[i]))
			if !lt.Equal(want.lineTotal[i]) {
				t.Fatalf("line %d: %s vs %s", i, lt, want.lineTotal[i])
			}
			sub = sub.Add(lt)
		}
		// Hoodie has the highest premium base rate of the categories ordered.
		for _, other := range []string{"tshirt", "cap", "tote"} {
			if !rates.base["hoodie/premium"].GreaterThan(rates.base[other+"/premium"]) {
				t.Fatalf("test assumes hoodie ships with the highest base rate; %s has %s", other, rates.base[other+"/premium"])
			}
		}
		ship := rates.base["hoodie/premium"].
			Add(rates.additional["hoodie/premium"]). // the second zip hoodie
			Add(rates.additional["tshirt/premium"].Mul(decimal.NewFromInt(3 + 1))).
			Add(rates.additional["cap/premium"]).
			Add(rates.additional["tote/premium"].Mul(decimal.NewFromInt(4)))
		if !sub.Equal(want.subtotal) || !ship.Equal(want.shipping) || !want.grand.Equal(sub.Add(ship)) {
			t.Fatalf("expectations disagree: subtotal %s/%s shipping %s/%s", sub, want.subtotal, ship, want.shipping)
		}
		if !want.lineAddon[1].Equal(decimal.RequireFromString("6.00")) || !want.lineAddon[3].Equal(decimal.RequireFromString("1.50")) {
			t.Fatalf("add-on surcharges: %v", want.lineAddon)
		}
		t.Logf("expected: subtotal %s shipping %s grand %s", want.subtotal.StringFixed(2), want.shipping.StringFixed(2), want.grand.StringFixed(2))

		o, _ := post(t, body)
		ovCheckPricing(t, "create response", o.Pricing, want)
		det := ovGetDetail(t, c, o.OrderID)
		ovCheckDetail(t, det, want)
		for i, l := range det.LineItems {
			wantAddon := []string{"", "lace_applique_emb", "", "fabric_applique", ""}[i]
			if (l.AddonService == nil) != (wantAddon == "") || l.AddonService != nil && *l.AddonService != wantAddon {
				t.Errorf("line %d addon_service %v, want %q", i, l.AddonService, wantAddon)
			}
		}
		if !slices.Equal(det.AddonService, []string{"carton_box"}) || det.ShippingService != "premium" {
			t.Errorf("order addon %v, service %q", det.AddonService, det.ShippingService)
		}
		// The list shows the same pricing.
		var page struct {
			Data []ovCreated `json:"data"`
		}
		c.Get("/v1/orders/pod?limit=1").JSON(t, &page)
		if len(page.Data) != 1 || page.Data[0].OrderID != o.OrderID {
			t.Fatalf("newest listed order is not the pricing order: %+v", page.Data)
		}
		ovCheckPricing(t, "list", page.Data[0].Pricing, want)
	})

	// Nothing but the 201s created an order.
	var page struct {
		Data       []orderrm.Order `json:"data"`
		NextCursor *string         `json:"next_cursor"`
	}
	r := c.Get("/v1/orders/pod?limit=100")
	if r.Status != 200 {
		t.Fatalf("list: %d %s", r.Status, r.Body)
	}
	r.JSON(t, &page)
	if page.NextCursor != nil || len(page.Data) != len(created) {
		t.Fatalf("%d orders listed (next_cursor %v), %d creates answered 201", len(page.Data), page.NextCursor, len(created))
	}
	for _, o := range page.Data {
		if !created[o.OrderID] {
			t.Errorf("listed order %s (%s) was not created by a 201", o.OrderID, o.ReferenceID)
		}
	}
	t.Logf("%d orders created by 201 answers; the list holds exactly them", len(created))
}
