// Package delivery is the webhook delivery log: built from delivery tasks
// (a delivery exists and is pending, with its payload), attempt results and
// webhook facts (a disabled webhook's pending deliveries are cancelled, a
// deleted one's log goes), and the queries the deliveries endpoints call.
package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/periodic"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumerName is the projector's consumer group and offsets key.
const ConsumerName = "projections.deliveries"

// Projector builds webhook_deliveries. Every write is conditional, so a
// record applied twice, or records of the three topics met in any order,
// give the same row.
func Projector(n schemas.Naming, log *slog.Logger) stream.Consumer {
	return stream.Consumer{
		Name:   ConsumerName,
		Topics: n.Topics(schemas.TopicWebhookDeliveries, schemas.TopicWebhookAttempts, schemas.TopicWebhookEvents),
		Handle: stream.Sink(func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
			batch := &pgx.Batch{}
			for _, r := range recs {
				if err := queue(batch, n.LogicalTopic(r.Topic), r); err != nil {
					// The runner dead-letters it; the rest go on.
					return stream.Poison(fmt.Errorf("delivery log record %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err))
				}
			}
			if batch.Len() == 0 {
				return nil
			}
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return fmt.Errorf("project deliveries: %w", err)
			}
			return nil
		}),
	}
}

// queue adds the writes of r, read from the logical topic, to b.
func queue(b *pgx.Batch, topic string, r *kgo.Record) error {
	switch topic {
	case schemas.TopicWebhookDeliveries:
		var t schemas.DeliveryTask
		if err := json.Unmarshal(r.Value, &t); err != nil {
			return err
		}
		queueTask(b, t)
	case schemas.TopicWebhookAttempts:
		var res schemas.AttemptResult
		if err := json.Unmarshal(r.Value, &res); err != nil {
			return err
		}
		queueResult(b, res)
	case schemas.TopicWebhookEvents:
		ev, err := schemas.ParseEvent(r.Value)
		if err != nil {
			return err
		}
		var w schemas.WebhookFact
		if err := ev.Decode(&w); err != nil {
			return err
		}
		switch ev.Type {
		case schemas.TypeWebhookDisabled:
			b.Queue(`UPDATE webhook_deliveries SET status = 'cancelled', last_error = 'webhook_disabled', next_retry_at = NULL,
				updated_at = now() WHERE webhook_id = $1 AND status = 'pending' AND gen <= $2`, w.ID, w.Gen)
		case schemas.TypeWebhookDeleted:
			b.Queue(`DELETE FROM webhook_deliveries WHERE webhook_id = $1`, w.ID)
		}
	}
	return nil
}

// queueTask records a delivery (first attempt of a run): a new row, or a
// newer run of a resent one. Deliveries of a webhook that no longer exists
// are not recorded.
func queueTask(b *pgx.Batch, t schemas.DeliveryTask) {
	b.Queue(`INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id, topic, payload, status, run, gen,
			next_retry_at, created_at)
		SELECT $1::uuid, $2::uuid, $3::uuid, $4::uuid, $5::text, $6::json, 'pending', $7::int, $8::int, $9::timestamptz, $10::timestamptz
		WHERE EXISTS (SELECT 1 FROM webhooks WHERE id = $2::uuid)
		ON CONFLICT (id) DO UPDATE SET
			payload = COALESCE(webhook_deliveries.payload, excluded.payload),
			status = CASE WHEN webhook_deliveries.run < excluded.run THEN 'pending' ELSE webhook_deliveries.status END,
			run_attempt = CASE WHEN webhook_deliveries.run < excluded.run THEN 0 ELSE webhook_deliveries.run_attempt END,
			next_retry_at = CASE WHEN webhook_deliveries.run < excluded.run THEN excluded.next_retry_at ELSE webhook_deliveries.next_retry_at END,
			gen = GREATEST(webhook_deliveries.gen, excluded.gen),
			run = GREATEST(webhook_deliveries.run, excluded.run),
			updated_at = now()`,
		t.DeliveryID, t.WebhookID, t.AccountID, t.EventID, t.Topic, string(t.Payload), t.Run, t.Gen, t.DueAt, t.CreatedAt)
}

// queueResult applies an attempt result once: to its run, past the last
// attempt applied, and not over a cancelled or finished delivery (a success
// always counts: the client has the event); a result of a later run (its
// task not read yet) moves the row to that run.
// A result met before its task makes the row, without payload until the
// task fills it.
func queueResult(b *pgx.Batch, r schemas.AttemptResult) {
	attempted := 0
	if r.Attempted {
		attempted = 1
	}
	var delivered *time.Time
	if r.Status == schemas.DeliverySuccess {
		delivered = &r.At
	}
	b.Queue(`INSERT INTO webhook_deliveries AS d (id, webhook_id, account_id, event_id, topic, status, attempts, run, run_attempt,
			gen, last_status_code, last_error, next_retry_at, delivered_at, created_at)
		SELECT $1::uuid, $2::uuid, $3::uuid, $4::uuid, $5::text, $6::text, $7::int * $9::int, $8::int, $9::int, $10::int,
			$11::int, $12::text, $13::timestamptz, $14::timestamptz, $15::timestamptz
		WHERE EXISTS (SELECT 1 FROM webhooks WHERE id = $2::uuid)
		ON CONFLICT (id) DO UPDATE SET
			status = excluded.status,
			attempts = d.attempts + $7::int,
			run = excluded.run,
			run_attempt = excluded.run_attempt,
			last_status_code = CASE WHEN $7::int = 1 THEN excluded.last_status_code ELSE d.last_status_code END,
			last_error = excluded.last_error,
			next_retry_at = excluded.next_retry_at,
			delivered_at = COALESCE(d.delivered_at, excluded.delivered_at),
			updated_at = now()
		WHERE d.run < excluded.run
			OR (d.run = excluded.run AND d.run_attempt < excluded.run_attempt
				AND (d.status = 'pending' OR excluded.status = 'success'))`,
		r.DeliveryID, r.WebhookID, r.AccountID, r.EventID, r.Topic, r.Status, attempted, r.Run, r.Attempt,
		r.Gen, r.StatusCode, r.Error, r.NextRetryAt, delivered, r.CreatedAt)
}

// Sweep removes delivery logs older than retention, a chunk at a time, and
// returns how many it removed.
func Sweep(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) (int64, error) {
	var total int64
	for {
		tag, err := pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE id IN (
			SELECT id FROM webhook_deliveries WHERE created_at < now() - $1::interval LIMIT 5000)`, retention.String())
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < 5000 {
			return total, nil
		}
	}
}

// Sweeper runs Sweep every interval until ctx ends.
func Sweeper(ctx context.Context, pool *pgxpool.Pool, retention, every time.Duration, log *slog.Logger) {
	periodic.Run(ctx, every, func(ctx context.Context) {
		if n, err := Sweep(ctx, pool, retention); err != nil && ctx.Err() == nil {
			log.Warn("delivery log sweep failed", "err", err)
		} else if n > 0 {
			log.Info("old delivery logs removed", "rows", n)
		}
	})
}
