package schemas_test

// An external test package: commands/order imports schemas, so the events are
// built with the real decider without an import cycle.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/schemas"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/shopspring/decimal"
)

var (
	storeID  = uuid.MustParse("00000000-0000-0000-0000-0000000000a1")
	account  = uuid.MustParse("30000000-0000-0000-0000-000000000001")
	vTee     = uuid.MustParse("10000000-0000-0000-0000-000000000001")
	vHoodie  = uuid.MustParse("10000000-0000-0000-0000-000000000002")
	vTote    = uuid.MustParse("10000000-0000-0000-0000-000000000004")
	lifeT0   = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	allTypes = []string{
		schemas.TypeOrderCancelled, schemas.TypeOrderCreated, schemas.TypeOrderStatusUpdated,
		schemas.TypeTrackingCreated, schemas.TypeTrackingUpdated,
	}
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func catalog() map[uuid.UUID]order.Variant {
	v := func(id uuid.UUID, cat, price string, yarn []string, image string) order.Variant {
		return order.Variant{VariantID: id, ProductID: uuid.NewSHA1(id, []byte("product")), StoreID: storeID,
			StoreStatus: "ACTIVE", ProductStatus: "ACTIVE", Category: cat, RequiresYarnType: yarn, Price: dec(price),
			SKU: "SKU-" + strings.ToUpper(cat), Title: "Classic " + cat, ImageURL: image}
	}
	return map[uuid.UUID]order.Variant{
		vTee:    v(vTee, "tshirt", "14.50", nil, "https://cdn.example/tee.png"),
		vHoodie: v(vHoodie, "hoodie", "29.90", []string{"yarn_6_7mm", "yarn_20mm"}, ""),
		vTote:   v(vTote, "tote", "11.00", nil, "https://cdn.example/tote.png"),
	}
}

func rates() order.Rates {
	return order.Rates{
		Shipping: map[string]map[string]order.ShippingRate{
			"tshirt": {"eco": {Base: dec("4.75"), Additional: dec("1.50")}, "premium": {Base: dec("9.50"), Additional: dec("2.50")}},
			"hoodie": {"eco": {Base: dec("8.50"), Additional: dec("3.00")}, "premium": {Base: dec("14.00"), Additional: dec("4.50")}},
			"tote":   {"eco": {Base: dec("4.50"), Additional: dec("1.25")}, "premium": {Base: dec("9.00"), Additional: dec("2.25")}},
		},
		Sides: map[string]map[string]decimal.Decimal{
			"tshirt": {"front_side": dec("0"), "back": dec("2.40")},
			"hoodie": {"front_side": dec("0"), "back": dec("3.00")},
		},
		Yarn:           map[string]map[string]decimal.Decimal{"hoodie": {"yarn_6_7mm": dec("0"), "yarn_20mm": dec("2.50")}},
		Countries:      map[string]bool{"US": true, "DE": true},
		OrderAddonFees: map[string]decimal.Decimal{"carton_box": dec("1.25")},
	}
}

// standardBody is a standard order: a DTF t-shirt with two print sides, a
// mockup and a line add-on, and a photo-embroidered hoodie with a yarn type.
const standardBody = `{
 "reference_id": "SHOP-1001",
 "customer": {"email": "ann@example.com", "first_name": "Ann", "last_name": "Lee", "phone": "+1 512 555 0100"},
 "shipping_address": {"address1": "1 Main St", "address2": "Apt 4", "city": "Austin", "province": "TX", "country_code": "us", "zip": "73301"},
 "shipping_service": "eco",
 "addon_service": ["carton_box"],
 "note": "gift",
 "tags": "vip,holiday",
 "line_items": [
  {"variant_id": "10000000-0000-0000-0000-000000000001", "quantity": 2, "printing_technique": "DTF", "addon_service": "fabric_applique",
   "sides": {"front_side": "https://img.example/f.png", "back": "https://img.example/b.png", "mockup_url": "https://img.example/m.png"}},
  {"variant_id": "10000000-0000-0000-0000-000000000002", "quantity": 1, "emb_file": "No EMB file", "design_emb_type": "Photo to Embroidery",
   "number_of_pets": 2, "yarn_type": "yarn_20mm", "sides": {"front_side": "https://img.example/pets.png"}}
 ]
}`

// labelBody is a label order: the client ships with its own label, so there
// is no shipping address.
const labelBody = `{
 "reference_id": "SHOP-1002",
 "customer": {"email": "bo@example.com", "first_name": "Bo", "last_name": "Ng"},
 "label_link": "https://labels.example/1Z999.pdf",
 "tracking_number": "1Z999",
 "shipping_service": "premium",
 "addon_service": null,
 "line_items": [{"variant_id": "10000000-0000-0000-0000-000000000004", "quantity": 3, "sides": {"front_side": "https://img.example/t.png"}}]
}`

// details builds the create command's details the way the create handler
// does: decode, validate and price, then marshal lines, pricing, customer and
// address into the OrderDetails.
func details(t *testing.T, body string, orderID uuid.UUID) *schemas.OrderDetails {
	t.Helper()
	req, err := order.DecodeCreate([]byte(body))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	d, err := order.Validate(req, catalog(), rates())
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	for i := range d.Lines {
		d.Lines[i].LineItemID = uuid.NewSHA1(orderID, fmt.Appendf(nil, "line/%d", i))
	}
	enc := func(v any) json.RawMessage {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	return &schemas.OrderDetails{
		CreatedVia: "api", IdempotencyKey: uuid.NewSHA1(orderID, []byte("idempotency")),
		Customer: enc(d.Customer), ShippingAddress: enc(d.ShippingAddress),
		LabelLink: d.LabelLink, TrackingNumber: d.TrackingNumber, ShippingService: d.ShippingService,
		AddonService: d.AddonService, Note: d.Note, Tags: d.Tags, Lines: enc(d.Lines), Pricing: enc(d.Pricing),
	}
}

type step struct {
	cmd  order.Command
	want []string // event types
}

func command(orderID uuid.UUID, n int, kind string, mods ...func(*order.Command)) order.Command {
	c := order.Command{ID: uuid.NewSHA1(orderID, fmt.Appendf(nil, "command/%d", n)), Kind: kind, OrderID: orderID, AccountID: account}
	for _, m := range mods {
		m(&c)
	}
	return c
}

// run decides the steps in turn, evolving the state, and returns every
// event's record value.
func run(t *testing.T, steps []step) [][]byte {
	t.Helper()
	var s order.State
	var out [][]byte
	for i, st := range steps {
		evs, err := order.Decide(s, st.cmd, lifeT0.Add(time.Duration(i)*time.Minute+123456789*time.Nanosecond))
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, st.cmd.Kind, err)
		}
		var got []string
		for _, ev := range evs {
			got = append(got, ev.Type)
			s = order.Evolve(s, ev)
			raw, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, raw)
		}
		if !slices.Equal(got, st.want) {
			t.Fatalf("step %d (%s): events %v, want %v", i, st.cmd.Kind, got, st.want)
		}
	}
	return out
}

// lifecycle is a standard order from creation to delivery: a failed push,
// an automatic retry, another failure, a manual retry, a successful push,
// sync, tracking and fulfilment.
func lifecycle(t *testing.T) [][]byte {
	orderID := uuid.MustParse("20000000-0000-0000-0000-000000000001")
	n := 0
	c := func(kind string, mods ...func(*order.Command)) order.Command {
		n++
		return command(orderID, n, kind, mods...)
	}
	attempt := func(a int) func(*order.Command) { return func(c *order.Command) { c.Attempt = a } }
	failure := func(msg string) func(*order.Command) { return func(c *order.Command) { c.Error = msg } }
	fulfil := func(status string, tr *schemas.Tracking) func(*order.Command) {
		return func(c *order.Command) { c.Status, c.Tracking = status, tr }
	}
	track := func(status, url string) *schemas.Tracking {
		return &schemas.Tracking{TrackingNumber: "1Z12345E0205271688", Carrier: "UPS", TrackingURL: url, ShipmentStatus: status}
	}
	const url1 = "https://track.example/ups/1Z12345E0205271688"
	create := c(order.KindCreate, func(c *order.Command) {
		c.ReferenceID, c.StoreID, c.Details = "SHOP-1001", storeID, details(t, standardBody, orderID)
	})
	upd := []string{schemas.TypeOrderStatusUpdated}
	return run(t, []step{
		{create, []string{schemas.TypeOrderCreated}},
		{c(order.KindStartPush), upd},
		{c(order.KindFailPush, attempt(1), failure("platform answered 503")), upd},
		{c(order.KindAutoRetry, attempt(1)), upd},
		{c(order.KindStartPush), upd},
		{c(order.KindFailPush, attempt(2), failure("platform timed out")), upd},
		{c(order.KindRetry), upd},
		{c(order.KindStartPush), upd},
		{c(order.KindCompletePush, attempt(3), func(c *order.Command) {
			c.PlatformOrderID, c.PlatformOrderNumber = "gid://shop/Order/5550001", "#1001"
		}), upd},
		{c(order.KindFulfillment, fulfil(schemas.StatusSynced, nil)), upd},
		{c(order.KindFulfillment, fulfil("", track("label_created", url1))), []string{schemas.TypeTrackingCreated}},
		{c(order.KindFulfillment, fulfil("", track("in_transit", url1))), []string{schemas.TypeTrackingUpdated}},
		{c(order.KindFulfillment, fulfil(schemas.StatusFulfilled, track("delivered", url1+"?v=2"))),
			[]string{schemas.TypeOrderStatusUpdated, schemas.TypeTrackingUpdated}},
	})
}

// cancelled is a label order cancelled while pending, and a standard order
// cancelled after its push failed.
func cancelled(t *testing.T) [][]byte {
	label := uuid.MustParse("20000000-0000-0000-0000-000000000002")
	out := run(t, []step{
		{command(label, 1, order.KindCreate, func(c *order.Command) {
			c.ReferenceID, c.StoreID, c.Details = "SHOP-1002", storeID, details(t, labelBody, label)
		}), []string{schemas.TypeOrderCreated}},
		{command(label, 2, order.KindCancel), []string{schemas.TypeOrderCancelled}},
	})
	failed := uuid.MustParse("20000000-0000-0000-0000-000000000003")
	return append(out, run(t, []step{
		{command(failed, 1, order.KindCreate, func(c *order.Command) {
			c.ReferenceID, c.StoreID, c.Details = "SHOP-1003", storeID, details(t, standardBody, failed)
		}), []string{schemas.TypeOrderCreated}},
		{command(failed, 2, order.KindStartPush), []string{schemas.TypeOrderStatusUpdated}},
		{command(failed, 3, order.KindFailPush, func(c *order.Command) { c.Attempt, c.Error = 1, "store disconnected" }),
			[]string{schemas.TypeOrderStatusUpdated}},
		{command(failed, 4, order.KindCancel), []string{schemas.TypeOrderCancelled}},
	})...)
}

func TestEventSchemaTypes(t *testing.T) {
	if got := schemas.EventSchemaTypes(); !slices.Equal(got, allTypes) {
		t.Fatalf("EventSchemaTypes() = %v, want %v", got, allTypes)
	}
}

func TestDecidedEventsValidate(t *testing.T) {
	events := append(lifecycle(t), cancelled(t)...)
	seen := map[string]bool{}
	for i, raw := range events {
		var env struct {
			Type string `json:"topic"`
		}
		_ = json.Unmarshal(raw, &env)
		seen[env.Type] = true
		if err := schemas.ValidateEvent(raw); err != nil {
			t.Errorf("event %d (%s) is invalid: %v\n%s", i, env.Type, err, raw)
		}
	}
	for _, typ := range allTypes {
		if !seen[typ] {
			t.Errorf("no %s event in the lifecycle", typ)
		}
	}
}

// TestDecidedEventShapes pins what the schemas rely on in the encoding.
func TestDecidedEventShapes(t *testing.T) {
	events := lifecycle(t)
	created := string(events[0])
	for _, want := range []string{
		`"grand_total":81.95`, `"subtotal":70.45`, `"shipping_total":11.50`, `"discount_amount":0.00`,
		`"unit_price":18.40`, `"line_total":36.80`, `"line_addon_surcharge":3.00`,
		`"country_code":"US"`, `"tracking":null`, `"client_status":"PENDING"`, `"shipment_status":null`,
	} {
		if !strings.Contains(created, want) {
			t.Errorf("order.created lacks %s:\n%s", want, created)
		}
	}
	if strings.Contains(created, `"previous"`) || strings.Contains(created, `"push"`) {
		t.Errorf("order.created carries previous or push:\n%s", created)
	}
	labelCreated := string(cancelled(t)[0])
	for _, want := range []string{`"shipping_address":null`, `"addon_service":[]`, `"label_link":"https://labels.example/1Z999.pdf"`, `"shipping_total":0.00`} {
		if !strings.Contains(labelCreated, want) {
			t.Errorf("label order.created lacks %s:\n%s", want, labelCreated)
		}
	}
}

// mutate decodes an event, lets f change it and encodes it again.
func mutate(t *testing.T, raw []byte, f func(ev map[string]any)) []byte {
	t.Helper()
	var ev map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&ev); err != nil {
		t.Fatal(err)
	}
	f(ev)
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func obj(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m = m[k].(map[string]any)
	}
	return m
}

func TestInvalidEventsFail(t *testing.T) {
	events := lifecycle(t)
	byType := func(typ string) []byte {
		for _, raw := range events {
			if bytes.Contains(raw, []byte(`"topic":"`+typ+`"`)) {
				return raw
			}
		}
		t.Fatalf("no %s event", typ)
		return nil
	}
	created, updated := byType(schemas.TypeOrderCreated), byType(schemas.TypeOrderStatusUpdated)
	trackingCreated, trackingUpdated := byType(schemas.TypeTrackingCreated), byType(schemas.TypeTrackingUpdated)
	cancelledEv := cancelled(t)[1]
	line0 := func(ev map[string]any) map[string]any {
		return obj(ev, "data", "created")["line_items"].([]any)[0].(map[string]any)
	}

	tests := []struct {
		name string
		raw  []byte
	}{
		{"status_updated without previous", mutate(t, updated, func(ev map[string]any) { delete(obj(ev, "data"), "previous") })},
		{"cancelled without previous", mutate(t, cancelledEv, func(ev map[string]any) { delete(obj(ev, "data"), "previous") })},
		{"tracking.updated without previous", mutate(t, trackingUpdated, func(ev map[string]any) { delete(obj(ev, "data"), "previous") })},
		{"tracking.updated with empty previous", mutate(t, trackingUpdated, func(ev map[string]any) { obj(ev, "data")["previous"] = map[string]any{} })},
		{"created with previous", mutate(t, created, func(ev map[string]any) { obj(ev, "data")["previous"] = map[string]any{"status": "PENDING"} })},
		{"tracking.created with previous", mutate(t, trackingCreated, func(ev map[string]any) {
			obj(ev, "data")["previous"] = map[string]any{"carrier": "DHL"}
		})},
		{"created without details", mutate(t, created, func(ev map[string]any) { delete(obj(ev, "data"), "created") })},
		{"unknown status", mutate(t, updated, func(ev map[string]any) { obj(ev, "data", "order")["client_status"] = "SHIPPED" })},
		{"lower-case status", mutate(t, updated, func(ev map[string]any) { obj(ev, "data", "previous")["status"] = "pending" })},
		{"status_updated to CANCELLED", mutate(t, updated, func(ev map[string]any) { obj(ev, "data", "order")["client_status"] = "CANCELLED" })},
		{"created not PENDING", mutate(t, created, func(ev map[string]any) { obj(ev, "data", "order")["client_status"] = "SUCCESS" })},
		{"money as a string", mutate(t, created, func(ev map[string]any) { obj(ev, "data", "created", "pricing")["grand_total"] = "81.95" })},
		{"money with three decimals", mutate(t, created, func(ev map[string]any) { line0(ev)["unit_price"] = json.Number("18.405") })},
		{"extra field in the order ref", mutate(t, updated, func(ev map[string]any) { obj(ev, "data", "order")["status"] = "SUCCESS" })},
		{"extra field in pricing", mutate(t, created, func(ev map[string]any) { obj(ev, "data", "created", "pricing")["tax"] = 0 })},
		{"extra field in a line item", mutate(t, created, func(ev map[string]any) { line0(ev)["price"] = 1 })},
		{"extra field in tracking", mutate(t, trackingCreated, func(ev map[string]any) { obj(ev, "data", "tracking")["eta"] = "tomorrow" })},
		{"extra field in push", mutate(t, updated, func(ev map[string]any) { obj(ev, "data", "push")["retry"] = true })},
		{"extra field in data", mutate(t, updated, func(ev map[string]any) { obj(ev, "data")["status"] = "PROCESSING" })},
		{"extra field in the envelope", mutate(t, updated, func(ev map[string]any) { ev["type"] = "order.status_updated" })},
		{"missing order ref field", mutate(t, updated, func(ev map[string]any) { delete(obj(ev, "data", "order"), "shipment_status") })},
		{"tracking missing on tracking.created", mutate(t, trackingCreated, func(ev map[string]any) { obj(ev, "data")["tracking"] = nil })},
		{"push on a cancellation", mutate(t, cancelledEv, func(ev map[string]any) { obj(ev, "data")["push"] = map[string]any{"attempt": 1} })},
		{"nil line_item_id", mutate(t, created, func(ev map[string]any) { line0(ev)["line_item_id"] = uuid.Nil.String() })},
		{"unknown side code", mutate(t, created, func(ev map[string]any) { line0(ev)["sides"] = map[string]any{"top": "https://img.example/x.png"} })},
		{"label order with an address", mutate(t, created, func(ev map[string]any) { obj(ev, "data", "created")["tracking_number"] = "1Z1" })},
		{"id not a uuid", mutate(t, updated, func(ev map[string]any) { ev["id"] = "evt_123" })},
		{"created_at not a date-time", mutate(t, updated, func(ev map[string]any) { ev["created_at"] = "21/11/2026 10:00" })},
		{"order created_at not a date-time", mutate(t, updated, func(ev map[string]any) { obj(ev, "data", "order")["created_at"] = "yesterday" })},
		{"topic of another type", mutate(t, created, func(ev map[string]any) { ev["topic"] = schemas.TypeOrderCancelled })},
		{"unknown topic", mutate(t, created, func(ev map[string]any) { ev["topic"] = "order.shipped" })},
		{"no topic", mutate(t, created, func(ev map[string]any) { delete(ev, "topic") })},
		{"not an object", []byte(`[]`)},
		{"not JSON", []byte(`{"topic":`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := schemas.ValidateEvent(tt.raw)
			if err == nil {
				t.Fatalf("ValidateEvent accepted\n%s", tt.raw)
			}
			t.Log(err)
		})
	}
}

// TestTopicConst validates each event under every type's schema, compiled
// straight from the files: only its own type's schema may accept it, so a
// consumer that picks the schema by other means still tells types apart.
func TestTopicConst(t *testing.T) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	files, err := filepath.Glob(filepath.Join("events", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	byType := map[string]*jsonschema.Schema{}
	ids := map[string]string{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		m := doc.(map[string]any)
		id := m["$id"].(string)
		if want := "https://printpod.example/schemas/events/" + filepath.Base(f); id != want {
			t.Errorf("%s: $id %s, want %s", f, id, want)
		}
		if err := c.AddResource(id, doc); err != nil {
			t.Fatal(err)
		}
		typ := strings.TrimSuffix(filepath.Base(f), ".schema.json")
		if typ == "common" {
			continue
		}
		if got := obj(m, "properties", "topic")["const"]; got != typ {
			t.Errorf("%s: topic const %v, want %s", f, got, typ)
		}
		ids[typ] = id
	}
	for typ, id := range ids {
		byType[typ] = c.MustCompile(id)
	}
	events := append(lifecycle(t), cancelled(t)...)
	for _, raw := range events {
		var env struct {
			Type string `json:"topic"`
		}
		_ = json.Unmarshal(raw, &env)
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		for typ, sch := range byType {
			err := sch.Validate(inst)
			switch {
			case typ == env.Type && err != nil:
				t.Errorf("%s rejected by its own schema: %v", typ, err)
			case typ != env.Type && err == nil:
				t.Errorf("%s schema accepted a %s event", typ, env.Type)
			}
		}
		// Only the topic tells tracking.created from a tracking.updated
		// without previous, so the const must be checked.
		if env.Type == schemas.TypeTrackingCreated {
			retyped := mutate(t, raw, func(ev map[string]any) { ev["topic"] = schemas.TypeTrackingUpdated })
			inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(retyped))
			if byType[schemas.TypeTrackingCreated].Validate(inst) == nil {
				t.Errorf("tracking.created schema accepted topic %s", schemas.TypeTrackingUpdated)
			}
		}
	}
}

// TestSchemasFollowGoTypes checks the common definitions against the Go
// types the events are encoded from: every JSON field is a property, and a
// field is required exactly when its tag has no omitempty.
func TestSchemasFollowGoTypes(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("events", "common.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var common struct {
		Defs map[string]struct {
			Required   []string                   `json:"required"`
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &common); err != nil {
		t.Fatal(err)
	}
	for def, v := range map[string]any{
		"order_ref": schemas.OrderRef{}, "tracking": schemas.Tracking{}, "push_attempt": schemas.PushAttempt{},
		"order_details": schemas.OrderDetails{}, "line_item": order.Line{}, "pricing": order.Pricing{},
		"customer": order.Customer{}, "address": order.Address{},
	} {
		d, ok := common.Defs[def]
		if !ok {
			t.Errorf("no $defs/%s", def)
			continue
		}
		var fields, required []string
		jsonFields(reflect.TypeOf(v), &fields, &required)
		var props []string
		for p := range d.Properties {
			props = append(props, p)
		}
		slices.Sort(fields)
		slices.Sort(props)
		slices.Sort(required)
		want := slices.Clone(d.Required)
		slices.Sort(want)
		if !slices.Equal(fields, props) {
			t.Errorf("$defs/%s properties %v, Go type %T encodes %v", def, props, v, fields)
		}
		if !slices.Equal(required, want) {
			t.Errorf("$defs/%s required %v, Go type %T always encodes %v", def, want, v, required)
		}
	}
}

func jsonFields(typ reflect.Type, fields, required *[]string) {
	for f := range typ.Fields() {
		tag, hasTag := f.Tag.Lookup("json")
		if f.Anonymous && !hasTag {
			jsonFields(f.Type, fields, required)
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		*fields = append(*fields, name)
		if !slices.Contains(strings.Split(opts, ","), "omitempty") {
			*required = append(*required, name)
		}
	}
}

// TestDocExamplesValidate keeps the examples in docs/events.md valid: every
// ```json block there is a whole event.
func TestDocExamplesValidate(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "docs", "events.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	rest := string(raw)
	for {
		_, block, ok := strings.Cut(rest, "```json\n")
		if !ok {
			break
		}
		block, rest, ok = strings.Cut(block, "```")
		if !ok {
			t.Fatal("unterminated json block")
		}
		var env struct {
			Type string `json:"topic"`
		}
		if err := json.Unmarshal([]byte(block), &env); err != nil {
			t.Errorf("example is not JSON: %v\n%s", err, block)
			continue
		}
		seen[env.Type] = true
		if err := schemas.ValidateEvent([]byte(block)); err != nil {
			t.Errorf("example %s is invalid: %v", env.Type, err)
		}
	}
	for _, typ := range allTypes {
		if !seen[typ] {
			t.Errorf("docs/events.md has no %s example", typ)
		}
	}
}
