package order

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/stream"
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
				if u.ID == uuid.Nil || u.OrderID == uuid.Nil {
					return nil, stream.Poison(fmt.Errorf("fulfillment update %d/%d has no id or order id", rec.Partition, rec.Offset))
				}
				c := Command{ID: uuid.NewSHA1(u.ID, []byte("fulfillment")), Kind: KindFulfillment, OrderID: u.OrderID,
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

// PublishFulfillment writes one update to pod.fulfillment.updates.
func PublishFulfillment(ctx context.Context, producer *kgo.Client, n schemas.Naming, u schemas.FulfillmentUpdate) error {
	value, err := codec.Marshal(u)
	if err != nil {
		return err
	}
	return producer.ProduceSync(ctx, &kgo.Record{Topic: n.Topic(schemas.TopicFulfillmentUpdates), Key: []byte(u.OrderID.String()), Value: value}).FirstErr()
}
