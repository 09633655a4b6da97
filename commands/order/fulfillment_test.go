package order

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestValidateFulfillment(t *testing.T) {
	good := schemas.Tracking{TrackingNumber: "1Z999AA10123456784", Carrier: "UPS",
		TrackingURL: "https://www.ups.com/track?tracknum=1Z999AA10123456784", ShipmentStatus: "in_transit"}
	with := func(f func(*schemas.Tracking)) *schemas.Tracking {
		tr := good
		f(&tr)
		return &tr
	}
	tests := []struct {
		name     string
		status   string
		tracking *schemas.Tracking
		refused  string // a word of the refusal; "" when valid
	}{
		{"a status alone is valid", schemas.StatusSynced, nil, ""},
		{"tracking alone is valid", "", &good, ""},
		{"tracking without a URL or status is valid", schemas.StatusFulfilled, with(func(t *schemas.Tracking) { t.TrackingURL, t.ShipmentStatus = "", "" }), ""},
		{"an update saying nothing is refused", "", nil, "neither"},
		{"an unknown status is refused", "SHIPPED", nil, "SYNCED or FULFILLED"},
		{"tracking without a number is refused", "", with(func(t *schemas.Tracking) { t.TrackingNumber = "" }), "tracking_number and a carrier"},
		{"tracking without a carrier is refused", "", with(func(t *schemas.Tracking) { t.Carrier = "" }), "tracking_number and a carrier"},
		{"a javascript URL is refused", "", with(func(t *schemas.Tracking) { t.TrackingURL = "javascript:alert(1)" }), "http(s) URL"},
		{"a URL with a space is refused", "", with(func(t *schemas.Tracking) { t.TrackingURL = "https://t.example/a b" }), "space"},
		{"a URL of more than 2048 characters is refused", "", with(func(t *schemas.Tracking) { t.TrackingURL = "https://t.example/" + strings.Repeat("a", 2048) }), "at most 2048"},
		{"a number with a NUL is refused", "", with(func(t *schemas.Tracking) { t.TrackingNumber = "1Z\x00" }), "control"},
		{"a carrier with a bidi override is refused", "", with(func(t *schemas.Tracking) { t.Carrier = "UPS\u202e" }), "control"},
		{"a number with surrounding spaces is refused", "", with(func(t *schemas.Tracking) { t.TrackingNumber = " 1Z9 " }), "spaces"},
		{"a status of more than 100 characters is refused", "", with(func(t *schemas.Tracking) { t.ShipmentStatus = strings.Repeat("x", 101) }), "at most 100"},
		{"a number that is not UTF-8 is refused", "", with(func(t *schemas.Tracking) { t.TrackingNumber = "1Z\xff" }), "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateFulfillment(schemas.FulfillmentUpdate{ID: uuid.New(), OrderID: uuid.New(), Status: tt.status, Tracking: tt.tracking})
			switch {
			case tt.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.refused != "" && (err == nil || !strings.Contains(err.Error(), tt.refused)):
				t.Fatalf("err = %v, want a refusal saying %q", err, tt.refused)
			}
		})
	}
}

// TestTheBridgeDeadLettersAnUpdateItCannotForward: an update the
// decider could not apply (a javascript: tracking URL) is not forwarded;
// the stage runner dead-letters it with why, and a valid one becomes a
// fulfillment command whose id derives from the update's.
func TestTheBridgeDeadLettersAnUpdateItCannotForward(t *testing.T) {
	handle := FulfillmentBridge(schemas.Naming{}, slog.New(slog.DiscardHandler)).Handle
	rec := func(u schemas.FulfillmentUpdate) *kgo.Record {
		v, err := codec.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Value: v, Timestamp: time.Now()}
	}
	bad := schemas.FulfillmentUpdate{ID: uuid.New(), OrderID: uuid.New(),
		Tracking: &schemas.Tracking{TrackingNumber: "1Z9", Carrier: "UPS", TrackingURL: "javascript:alert(1)"}}
	_, err := handle(context.Background(), nil, []*kgo.Record{rec(bad)})
	if !stream.IsPermanent(err) || !strings.Contains(err.Error(), "tracking_url") {
		t.Fatalf("err = %v; want the update dead-lettered for its tracking_url", err)
	}
	good := schemas.FulfillmentUpdate{ID: uuid.New(), OrderID: uuid.New(), Status: schemas.StatusSynced}
	out, err := handle(context.Background(), nil, []*kgo.Record{rec(good)})
	if err != nil || len(out) != 1 {
		t.Fatalf("forwarded %d commands (%v), want 1", len(out), err)
	}
	var c Command
	if err := codec.Unmarshal(out[0].Value, &c); err != nil || c.Kind != KindFulfillment || c.ID != uuid.NewSHA1(good.ID, []byte("fulfillment")) {
		t.Fatalf("forwarded %+v (%v); want the update's fulfillment command", c, err)
	}
}
