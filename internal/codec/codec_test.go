package codec_test

import (
	"bytes"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/schemas"
)

// Consumers of the event topics, and records written before this codec,
// see the bytes encoding/json's semantics give: the codec must write what
// go-json-experiment's v1 package writes, and read what it reads.
func TestRecordsAreEncodedAsEncodingJSONEncodesThem(t *testing.T) {
	at := time.Date(2026, 11, 26, 7, 8, 9, 123456789, time.UTC)
	id := uuid.MustParse("0d6c5f4e-8a5b-4c1e-9e57-2f1b7c3a9d10")
	status := "PENDING"
	details := &schemas.OrderDetails{CreatedVia: "api", IdempotencyKey: id,
		Customer:        json.RawMessage("{ \"email\" : \"a&b@example.com\",\n \"first_name\": \"<Ada>\" }"),
		ShippingAddress: json.RawMessage(`{"address1":"1 Main St","city":"Austin","country_code":"US"}`),
		AddonService:    []string{"gift_wrap"}, Lines: json.RawMessage(`[ {"quantity": 2} ]`), Pricing: json.RawMessage(`{"total":"29.99"}`),
		Note: "fragile \u2028 line"}
	data := schemas.OrderEventData{Order: schemas.OrderRef{ID: id, ReferenceID: "ref-1", StoreID: id, AccountID: id,
		ClientStatus: &status, CreatedAt: at, UpdatedAt: at}, Previous: json.RawMessage(`{"status": "NEW"}`), Created: details,
		Push: &schemas.PushAttempt{Attempt: 1}}
	ev, err := schemas.NewEventWithID(id, schemas.TypeOrderCreated, at, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		v    any
		into func() any
	}{
		{"an order.created event", ev, func() any { return new(schemas.Event) }},
		{"its data", data, func() any { return new(schemas.OrderEventData) }},
		{"a create command", order.Command{ID: id, Kind: "create", OrderID: id, AccountID: id, ReferenceID: "ref-1", StoreID: id, Details: details},
			func() any { return new(order.Command) }},
		{"a push command, its store id zero", order.Command{ID: id, Kind: "start_push", OrderID: id, AccountID: id, Attempt: 2},
			func() any { return new(order.Command) }},
		{"a delivery task", schemas.DeliveryTask{DeliveryID: id, WebhookID: id, AccountID: id, EventID: id, Topic: schemas.TypeOrderCreated,
			Gen: 1, Run: 1, Attempt: 1, DueAt: at, CreatedAt: at, Payload: json.RawMessage(`{"id": "x"}`)}, func() any { return new(schemas.DeliveryTask) }},
		{"a map", map[string]any{"z": 1, "a": []int(nil), "m": map[string]string{"y": "<", "b": ">"}}, func() any { return new(map[string]any) }},
	} {
		want, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := codec.Marshal(tc.v)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is encoded\n %s\nwhere encoding/json's semantics give\n %s", tc.name, got, want)
		}
		a, b := tc.into(), tc.into()
		if err := codec.Unmarshal(want, a); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := json.Unmarshal(want, b); err != nil {
			t.Fatal(err)
		}
		ra, _ := json.Marshal(a)
		rb, _ := json.Marshal(b)
		if !bytes.Equal(ra, rb) {
			t.Errorf("%s is read as\n %s\nwhere encoding/json's semantics read\n %s", tc.name, ra, rb)
		}
	}
}
