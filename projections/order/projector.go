// Package order builds the order read models (list, detail, push attempts,
// queue) from pod.order.events and answers the queries the GET endpoints
// make.
package order

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumerName is the projector's consumer group and offsets key.
const ConsumerName = "projections.orders"

// NotifyProjected is the Postgres channel on which the projector announces
// an order it changed (payload: the order id).
const NotifyProjected = "order_projected"

// Tables are the read model tables this projector owns (podctl replay
// empties them), children first.
var Tables = []string{"order_push_attempts", "orders", "store_queues"}

// Projector returns the consumer that builds the order read model. Every
// write is conditional on the order's version (record header), so an event
// published twice is applied once.
func Projector(n schemas.Naming, log *slog.Logger) stream.Consumer {
	return stream.Consumer{
		Name:   ConsumerName,
		Topics: []string{n.Topic(schemas.TopicOrderEvents)},
		Handle: stream.Sink(func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
			batch := &pgx.Batch{}
			// The stores whose queue counts this batch may move are locked
			// first (put at the head of the batch below), in one sorted
			// statement: replicas working other
			// partitions then wait for each other instead of deadlocking,
			// and each later statement reads the count as it is now.
			var stores []uuid.UUID
			seenStore := map[uuid.UUID]bool{}
			var touched []string
			seen := map[uuid.UUID]bool{}
			for _, rec := range recs {
				// A record that cannot be decoded is dead-lettered by the
				// runner; the rest go on.
				ev, err := schemas.ParseEvent(rec.Value)
				if err != nil {
					return stream.Poison(fmt.Errorf("order event record %d/%d: %w", rec.Partition, rec.Offset, err))
				}
				version := schemas.OrderVersion(rec.Headers)
				var d schemas.OrderEventData
				if err := ev.Decode(&d); err != nil {
					return stream.Poison(fmt.Errorf("order event %s: %w", ev.ID, err))
				}
				if version <= 0 {
					return stream.Poison(fmt.Errorf("order event %s has no version header", ev.ID))
				}
				queue(batch, ev, d, version)
				if d.Order.StoreID != uuid.Nil && !seenStore[d.Order.StoreID] {
					seenStore[d.Order.StoreID] = true
					stores = append(stores, d.Order.StoreID)
				}
				if !seen[d.Order.ID] {
					seen[d.Order.ID] = true
					touched = append(touched, d.Order.ID.String())
				}
			}
			if len(stores) > 0 {
				slices.SortFunc(stores, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
				lock := &pgx.QueuedQuery{
					SQL: `WITH ins AS (INSERT INTO store_queues (store_id, pending) SELECT s, 0 FROM unnest($1::uuid[]) AS s
						ORDER BY s ON CONFLICT (store_id) DO NOTHING)
						SELECT 1 FROM store_queues WHERE store_id = ANY($1) ORDER BY store_id FOR UPDATE`,
					Arguments: []any{stores},
				}
				batch.QueuedQueries = append([]*pgx.QueuedQuery{lock}, batch.QueuedQueries...)
			}
			if len(touched) > 0 {
				batch.Queue(`SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id`, NotifyProjected, touched)
			}
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return fmt.Errorf("apply order events: %w", err)
			}
			return nil
		}),
	}
}

func queue(b *pgx.Batch, ev schemas.Event, d schemas.OrderEventData, version int) {
	o := d.Order
	at := ev.OccurredAt
	switch ev.Type {
	case schemas.TypeOrderCreated:
		c := d.Created
		if c == nil {
			return
		}
		// The order enters its store's queue last: its place is the queue's
		// length with it, and the store's count grows by one.
		b.Queue(`WITH ins AS (INSERT INTO orders (order_id, account_id, store_id, reference_id, status, duplicate, addon_service,
			pricing, created_via, customer, shipping_address, label_link, tracking_number, shipping_service, note, tags,
			line_items, idempotency_key, queued_at, created_at, updated_at, version, entry_position)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULLIF($12, ''), NULLIF($13, ''), $14, NULLIF($15, ''),
			NULLIF($16, ''), $17, $18, $19, $19, $20, $21,
			COALESCE((SELECT pending FROM store_queues WHERE store_id = $3), 0) + 1)
			ON CONFLICT (order_id) DO NOTHING RETURNING store_id)
			INSERT INTO store_queues (store_id, pending) SELECT store_id, 1 FROM ins
			ON CONFLICT (store_id) DO UPDATE SET pending = store_queues.pending + 1`,
			o.ID, o.AccountID, o.StoreID, o.ReferenceID, schemas.StatusPending, c.Duplicate, nonNil(c.AddonService),
			jsonOrNull(c.Pricing), c.CreatedVia, jsonOrNull(c.Customer), jsonOrNull(c.ShippingAddress), c.LabelLink,
			c.TrackingNumber, c.ShippingService, c.Note, c.Tags, jsonOrNull(c.Lines), c.IdempotencyKey, o.CreatedAt,
			o.UpdatedAt, version)
	case schemas.TypeOrderStatusUpdated, schemas.TypeOrderCancelled:
		to := schemas.StatusCancelled
		if o.ClientStatus != nil {
			to = *o.ClientStatus
		}
		var platformID, platformNumber string
		if p := d.Push; p != nil && to == schemas.StatusSuccess {
			platformID, platformNumber = p.PlatformOrderID, p.PlatformOrderNumber
		}
		// Entering or leaving PENDING moves the store's queue count with it;
		// an order entering takes the last place.
		b.Queue(`WITH old AS (SELECT order_id, status FROM orders WHERE order_id = $1 AND version < $2 FOR UPDATE),
			upd AS (UPDATE orders o SET status = $3, updated_at = $4, version = $2,
				queued_at = CASE WHEN $3 = 'PENDING' THEN $5 ELSE o.queued_at END,
				entry_position = CASE WHEN $3 = 'PENDING' AND old.status <> 'PENDING'
					THEN COALESCE((SELECT pending FROM store_queues q WHERE q.store_id = o.store_id), 0) + 1
					ELSE o.entry_position END,
				platform_order_id = COALESCE(NULLIF($6, ''), o.platform_order_id),
				platform_order_number = COALESCE(NULLIF($7, ''), o.platform_order_number)
				FROM old WHERE o.order_id = old.order_id
				RETURNING o.store_id, old.status AS was, o.status AS now)
			INSERT INTO store_queues (store_id, pending)
			SELECT store_id, (now = 'PENDING')::int - (was = 'PENDING')::int FROM upd WHERE (now = 'PENDING') <> (was = 'PENDING')
			ON CONFLICT (store_id) DO UPDATE SET pending = store_queues.pending + excluded.pending`,
			o.ID, version, to, o.UpdatedAt, at, platformID, platformNumber)
		if p := d.Push; p != nil {
			switch to {
			case schemas.StatusProcessing:
				b.Queue(`INSERT INTO order_push_attempts (order_id, attempt, started_at) SELECT $1, $2, $3
					WHERE EXISTS (SELECT 1 FROM orders WHERE order_id = $1) ON CONFLICT DO NOTHING`, o.ID, p.Attempt, at)
			case schemas.StatusSuccess, schemas.StatusFailed:
				outcome := "success"
				if to == schemas.StatusFailed {
					outcome = "failed"
				}
				b.Queue(`UPDATE order_push_attempts SET finished_at = $3, outcome = $4, error = NULLIF($5, '')
					WHERE order_id = $1 AND attempt = $2`, o.ID, p.Attempt, at, outcome, p.Error)
			}
		}
	case schemas.TypeTrackingCreated, schemas.TypeTrackingUpdated:
		b.Queue(`UPDATE orders SET tracking = $3, shipment_status = $4, updated_at = $5, version = $2
			WHERE order_id = $1 AND version < $2`, o.ID, version, d.Tracking, o.ShipmentStatus, o.UpdatedAt)
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func jsonOrNull(raw json.RawMessage) any {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return string(raw)
}
