// Package push is the push process manager: it turns order events into
// pushes to the store platform, and push results back into order commands.
package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/pgnotify"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumerName is the process manager's consumer group and offsets key.
const ConsumerName = "push-manager"

// NotifyJobs wakes push workers when jobs were added.
const (
	NotifyJobs = "push_jobs"
	jobsAdded  = "added"
)

// Job kinds.
const (
	JobStart     = "start"
	JobPush      = "push"
	JobAutoRetry = "auto_retry"
)

// Manager runs the consumer that records push jobs and the workers that
// carry them out. Jobs live in Postgres, written in the same transaction as
// the consumed offsets, so a restart loses none and a retry timer survives
// it; a job is deleted only after its command reached the log.
type Manager struct {
	Pool        *pgxpool.Pool
	Producer    *kgo.Client
	Platform    *Client
	Notify      *pgnotify.Listener // channel NotifyJobs
	Log         *slog.Logger
	RetryDelays []time.Duration // waits before the automatic retries
	Workers     int             // default 4
	Naming      schemas.Naming  // topic names on the cluster
}

// Consumer records jobs from pod.order.events.
func (m *Manager) Consumer() stream.Consumer {
	return stream.Consumer{Name: ConsumerName, Topics: []string{m.Naming.Topic(schemas.TopicOrderEvents)}, Handle: m.handle}
}

func (m *Manager) handle(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	// The last version handled per order: an event published twice (the
	// outbox is at-least-once) must not schedule its job again.
	handled := map[uuid.UUID]int{}
	var ids []uuid.UUID
	for _, rec := range recs {
		if id, err := uuid.ParseBytes(rec.Key); err == nil {
			ids = append(ids, id)
		}
	}
	rows, err := tx.Query(ctx, `SELECT order_id, version FROM push_orders WHERE order_id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	var hid uuid.UUID
	var hv int
	if _, err := pgx.ForEachRow(rows, []any{&hid, &hv}, func() error { handled[hid] = hv; return nil }); err != nil {
		return err
	}
	b := &pgx.Batch{}
	added := false
	for _, rec := range recs {
		// A record that cannot be decoded is dead-lettered by the runner;
		// the rest go on.
		ev, err := schemas.ParseEvent(rec.Value)
		if err != nil {
			return stream.Poison(fmt.Errorf("order event record %d/%d: %w", rec.Partition, rec.Offset, err))
		}
		var d schemas.OrderEventData
		if err := ev.Decode(&d); err != nil {
			return stream.Poison(fmt.Errorf("order event %s: %w", ev.ID, err))
		}
		o := d.Order
		status := ""
		if o.ClientStatus != nil {
			status = *o.ClientStatus
		}
		version := schemas.OrderVersion(rec.Headers)
		last, known := handled[o.ID]
		if version <= last || (!known && ev.Type != schemas.TypeOrderCreated) {
			continue // seen already, or an order whose creation this manager never saw
		}
		handled[o.ID] = version
		if ev.Type != schemas.TypeOrderCreated {
			b.Queue(`UPDATE push_orders SET version = $2 WHERE order_id = $1`, o.ID, version)
		}
		job := func(kind string, attempt int, due time.Time) {
			added = true
			b.Queue(`INSERT INTO push_jobs (order_id, store_id, kind, attempt, due_at) VALUES ($1, $2, $3, $4, $5)
				ON CONFLICT DO NOTHING`, o.ID, o.StoreID, kind, attempt, due)
		}
		switch ev.Type {
		case schemas.TypeOrderCreated:
			if d.Created == nil {
				continue
			}
			payload, err := json.Marshal(Order{OrderID: o.ID, ReferenceID: o.ReferenceID, Customer: d.Created.Customer,
				ShippingAddress: d.Created.ShippingAddress, LabelLink: d.Created.LabelLink, TrackingNumber: d.Created.TrackingNumber,
				ShippingService: d.Created.ShippingService, LineItems: d.Created.Lines, Note: d.Created.Note, Tags: d.Created.Tags})
			if err != nil {
				return err
			}
			b.Queue(`INSERT INTO push_orders (order_id, account_id, store_id, idempotency_key, payload, version)
				VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, o.ID, o.AccountID, o.StoreID, d.Created.IdempotencyKey, payload, version)
			job(JobStart, version, o.CreatedAt)
		case schemas.TypeOrderStatusUpdated:
			p := d.Push
			switch {
			case status == schemas.StatusPending:
				job(JobStart, version, ev.OccurredAt)
			case status == schemas.StatusProcessing && p != nil:
				job(JobPush, p.Attempt, ev.OccurredAt)
			case status == schemas.StatusFailed && p != nil && p.AutoRetries < len(m.RetryDelays) && p.AutoRetries < order.MaxAutoRetries:
				job(JobAutoRetry, p.Attempt, ev.OccurredAt.Add(m.RetryDelays[p.AutoRetries]))
			}
		case schemas.TypeOrderCancelled:
			b.Queue(`DELETE FROM push_jobs WHERE order_id = $1`, o.ID)
		}
	}
	if added {
		b.Queue(`SELECT pg_notify($1, $2)`, NotifyJobs, jobsAdded)
	}
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

type job struct {
	orderID uuid.UUID
	storeID uuid.UUID
	kind    string
	attempt int
}

// Run runs the workers until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	if m.Workers <= 0 {
		m.Workers = 4
	}
	wake, stop := m.Notify.Subscribe(NotifyJobs, jobsAdded)
	defer stop()
	var wg sync.WaitGroup
	for range m.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				found, err := m.next(ctx)
				if err != nil && ctx.Err() == nil {
					// The job stays; it is tried again.
					m.Log.Warn("push job failed; it will be retried", "err", err)
				}
				if !found || err != nil {
					select {
					case <-ctx.Done():
					case <-wake:
					case <-time.After(500 * time.Millisecond):
					}
				}
			}
		}()
	}
	wg.Wait()
}

// next works the next due job, if any: it locks the job's row (SKIP
// LOCKED, so workers and instances share jobs), does it and deletes it in
// the same transaction. A killed worker's transaction ends with its
// connection, so the job is free again at once; done twice, a job sends a
// command the decider already decided (ids derive from the job) and pushes
// with the same idempotency key. Starts are taken oldest first, and a
// store's next start waits while one of its push jobs is open: this keeps a
// store to few pushes in flight, not strictly one (a start's push job only
// appears once its PROCESSING event comes back).
func (m *Manager) next(ctx context.Context) (bool, error) {
	tx, err := m.Pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var j job
	err = tx.QueryRow(ctx, `SELECT order_id, store_id, kind, attempt FROM push_jobs j
		WHERE due_at <= now()
		AND (kind <> 'start' OR NOT EXISTS (SELECT 1 FROM push_jobs p WHERE p.store_id = j.store_id AND p.kind = 'push'))
		ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED`).Scan(&j.orderID, &j.storeID, &j.kind, &j.attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := m.work(ctx, j); err != nil {
		return true, fmt.Errorf("order %s %s job: %w", j.orderID, j.kind, err)
	}
	bg := context.WithoutCancel(ctx)
	if _, err := tx.Exec(bg, `DELETE FROM push_jobs WHERE order_id = $1 AND kind = $2 AND attempt = $3`,
		j.orderID, j.kind, j.attempt); err != nil {
		return true, err
	}
	return true, tx.Commit(bg)
}

func (m *Manager) work(ctx context.Context, j job) error {
	var cmd order.Command
	switch j.kind {
	case JobStart:
		cmd = order.Command{Kind: order.KindStartPush}
	case JobAutoRetry:
		cmd = order.Command{Kind: order.KindAutoRetry, Attempt: j.attempt}
	case JobPush:
		current, err := m.stillPushing(ctx, j)
		if err != nil {
			return err
		}
		if !current {
			return nil // cancelled, or an old attempt: nothing to push
		}
		if cmd, err = m.push(ctx, j); err != nil {
			return err
		}
	default:
		m.Log.Error("dropping unknown push job", "kind", j.kind)
		return nil
	}
	// Ids derive from the job, so a job worked twice sends a command the
	// decider already decided.
	cmd.ID = uuid.NewSHA1(j.orderID, fmt.Appendf(nil, "%s/%d", j.kind, j.attempt))
	cmd.OrderID = j.orderID
	return order.Send(ctx, m.Producer, m.Naming, cmd)
}

// stillPushing reports whether the decider still has the order in this
// push attempt (PROCESSING, same attempt number): a job from a repeated or
// stale event must not reach the platform.
func (m *Manager) stillPushing(ctx context.Context, j job) (bool, error) {
	var status *string
	var attempt *int
	err := m.Pool.QueryRow(ctx, `SELECT state->>'status', (state->>'push_attempts')::int FROM order_state WHERE order_id = $1`,
		j.orderID).Scan(&status, &attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return status != nil && *status == schemas.StatusProcessing && attempt != nil && *attempt == j.attempt, nil
}

// push calls the platform once (the client retries transient errors) and
// returns the command reporting the outcome.
func (m *Manager) push(ctx context.Context, j job) (order.Command, error) {
	var payload []byte
	var key uuid.UUID
	var domain *string
	err := m.Pool.QueryRow(ctx, `SELECT o.payload, o.idempotency_key, s.shop_domain FROM push_orders o
		LEFT JOIN stores s ON s.store_id = o.store_id WHERE o.order_id = $1`, j.orderID).Scan(&payload, &key, &domain)
	if errors.Is(err, pgx.ErrNoRows) {
		return order.Command{Kind: order.KindFailPush, Attempt: j.attempt, Error: "order content not found"}, nil
	}
	if err != nil {
		return order.Command{}, err
	}
	if domain == nil {
		return order.Command{Kind: order.KindFailPush, Attempt: j.attempt, Error: "store not found"}, nil
	}
	var o Order
	if err := json.Unmarshal(payload, &o); err != nil {
		return order.Command{}, err
	}
	res, err := m.Platform.CreateOrder(ctx, *domain, key, o)
	if ctx.Err() != nil {
		return order.Command{}, ctx.Err() // shutting down: the next owner pushes again (same key)
	}
	if err != nil {
		msg := err.Error()
		if len(msg) > 500 {
			msg = strings.ToValidUTF8(msg[:500], "") + "…"
		}
		return order.Command{Kind: order.KindFailPush, Attempt: j.attempt, Error: msg}, nil
	}
	return order.Command{Kind: order.KindCompletePush, Attempt: j.attempt,
		PlatformOrderID: res.PlatformOrderID, PlatformOrderNumber: res.PlatformOrderNumber}, nil
}
