package order

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/internal/uri"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// FulfillmentBridgeName is the consumer that turns fulfillment updates into
// order commands.
const FulfillmentBridgeName = "fulfillment-bridge"

// FulfillmentBridge forwards pod.fulfillment.updates to the order decider
// as fulfillment commands (command id derived from the update id, so an
// update forwarded twice is decided once).
func FulfillmentBridge(n schemas.Naming, log *slog.Logger) stream.Consumer {
	return stream.Consumer{
		Name:   FulfillmentBridgeName,
		Topics: []string{n.Topic(schemas.TopicFulfillmentUpdates)},
		Handle: func(ctx context.Context, _ pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
			var out []*kgo.Record
			for _, rec := range recs {
				var u schemas.FulfillmentUpdate
				if err := codec.Unmarshal(rec.Value, &u); err != nil {
					// The runner dead-letters it; the rest go on.
					return nil, stream.Poison(fmt.Errorf("fulfillment update %d/%d: %w", rec.Partition, rec.Offset, err))
				}
				if err := ValidateFulfillment(u); err != nil {
					// Dead-lettered with why, for its sender to correct.
					return nil, stream.Poison(fmt.Errorf("fulfillment update %d/%d: %w", rec.Partition, rec.Offset, err))
				}
				c := Command{ID: FulfillmentCommandID(u.ID), Kind: KindFulfillment, OrderID: u.OrderID,
					Status: u.Status, Tracking: u.Tracking}
				if !u.SentAt.IsZero() {
					at := u.SentAt.UTC()
					c.ReportedAt = &at
				}
				cmd, err := Record(n, c)
				if err != nil {
					return nil, stream.Poison(fmt.Errorf("fulfillment update %d/%d: %w", rec.Partition, rec.Offset, err))
				}
				out = append(out, cmd)
			}
			return out, nil
		},
	}
}

// FulfillmentCommandID is the id of the command the bridge makes of the
// update with id update: its decision tells whether the update applied.
func FulfillmentCommandID(update uuid.UUID) uuid.UUID {
	return uuid.NewSHA1(update, []byte("fulfillment"))
}

// PublishFulfillment writes one update to pod.fulfillment.updates.
func PublishFulfillment(ctx context.Context, producer *kgo.Client, n schemas.Naming, u schemas.FulfillmentUpdate) error {
	value, err := codec.Marshal(u)
	if err != nil {
		return err
	}
	return producer.ProduceSync(ctx, &kgo.Record{Topic: n.Topic(schemas.TopicFulfillmentUpdates), Key: []byte(u.OrderID.String()), Value: value}).FirstErr()
}

// Limits of a fulfillment update's tracking (characters).
const (
	maxTrackingField = 100
	maxTrackingURL   = 2048
)

// ValidateFulfillment checks an update before it is published or
// forwarded: a known status and/or tracking, whose number and carrier are
// set, whose fields hold no control or format characters and stay short,
// and whose tracking_url, when set, is an http(s) URL (clients show it as
// a link: no javascript: or data: URL reaches them).
func ValidateFulfillment(u schemas.FulfillmentUpdate) error {
	if u.ID == uuid.Nil || u.OrderID == uuid.Nil {
		return errors.New("the update has no id or order id")
	}
	if u.Status != "" && u.Status != schemas.StatusSynced && u.Status != schemas.StatusFulfilled {
		return fmt.Errorf("status must be SYNCED or FULFILLED, not %q", u.Status)
	}
	t := u.Tracking
	if t == nil {
		if u.Status == "" {
			return errNoFulfillment
		}
		return nil
	}
	if t.TrackingNumber == "" || t.Carrier == "" {
		return errors.New("tracking needs a tracking_number and a carrier")
	}
	for _, f := range []struct{ name, value string }{
		{"tracking_number", t.TrackingNumber}, {"carrier", t.Carrier}, {"shipment_status", t.ShipmentStatus}, {"tracking_url", t.TrackingURL},
	} {
		limit := maxTrackingField
		if f.name == "tracking_url" {
			limit = maxTrackingURL
		}
		if n := utf8.RuneCountInString(f.value); n > limit || !utf8.ValidString(f.value) {
			return fmt.Errorf("%s must be valid UTF-8 of at most %d characters", f.name, limit)
		}
		if strings.IndexFunc(f.value, Invisible) >= 0 || strings.TrimSpace(f.value) != f.value {
			return fmt.Errorf("%s must not hold control or format characters, nor start or end with spaces", f.name)
		}
	}
	if t.TrackingURL != "" {
		if !isHTTPURL(t.TrackingURL) {
			return errors.New("tracking_url must be an http(s) URL of the carrier's tracking page")
		}
		if err := uri.Valid(t.TrackingURL); err != nil {
			return fmt.Errorf("tracking_url %v", err)
		}
	}
	return nil
}
