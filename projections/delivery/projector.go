// Package delivery is the webhook delivery log: built from delivery tasks
// (a delivery exists and is pending, with its payload), attempt results and
// webhook deletions (a deleted webhook's log goes), and the queries the
// deliveries endpoints call.
package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/periodic"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumerName is the projector's consumer group and offsets key.
const ConsumerName = "projections.deliveries"

// Projector builds webhook_deliveries. Every write is conditional, so a
// record applied twice, or records of the three topics met in any order,
// give the same row. A batch is written with a few set-based statements:
// tasks and results go in rounds, each round holding a delivery at most
// once (its n-th record of the batch goes in round n), so one statement
// never touches a row twice and a delivery's records apply in their order;
// the webhooks deleted follow, in one statement (applyOrder).
func Projector(n schemas.Naming, log *slog.Logger) stream.Consumer {
	return stream.Consumer{
		Name:   ConsumerName,
		Topics: n.Topics(schemas.TopicWebhookDeliveries, schemas.TopicWebhookAttempts, schemas.TopicWebhookEvents),
		Handle: stream.Sink(func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
			ordered, err := applyOrder(n, recs)
			if err != nil {
				return err // the runner dead-letters it; the rest go on
			}
			batch := &pgx.Batch{}
			w := newRounds()
			for _, rec := range ordered {
				if err := w.add(rec); err != nil {
					// The runner dead-letters it; the rest go on.
					return stream.Poison(fmt.Errorf("delivery log record %s/%d/%d: %w", rec.r.Topic, rec.r.Partition, rec.r.Offset, err))
				}
			}
			w.flush(batch)
			if batch.Len() == 0 {
				return nil
			}
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return fmt.Errorf("project deliveries: %w", err)
			}
			return nil
		}),
		// A delivery's first result follows its task by the endpoint's
		// answer time, hundreds of milliseconds under load. Gathering a
		// second of records lets most of them meet their task in one
		// batch, where the two make one row write instead of an insert and
		// an update. Nothing waits on the log: it is read by clients
		// listing deliveries, which see it a second later.
		Linger:   LogLinger,
		MaxBatch: 5000,
	}
}

// LogLinger is how long the delivery log gathers a batch.
const LogLinger = time.Second

// record is a record of the batch, its topic's logical name, and the
// task it holds when it is one.
type record struct {
	r     *kgo.Record
	topic string
	task  *schemas.DeliveryTask
}

// applyOrder decodes the batch's tasks and orders the batch for applying:
// the tasks of first runs, then the other tasks and the results in their
// order, then the webhook facts. A batch holds its topics' partitions one
// after another, so a first attempt's result often comes before its own
// task; the two give the same row in either order, and a task met first
// lets its first result be written with it. A later run's task must not
// pass an earlier run's results (they would no longer count). The facts go
// last because the batch's order between topics is not the order in which
// things happened: a deletion removes the webhook's log whatever of it the
// batch held. (A disable changes no row: a pending delivery of a webhook
// not active for its generation is shown cancelled, see selectRecords.)
func applyOrder(n schemas.Naming, recs []*kgo.Record) ([]record, error) {
	out := make([]record, 0, len(recs))
	var rest, facts []record
	for _, r := range recs {
		rec := record{r: r, topic: n.LogicalTopic(r.Topic)}
		switch rec.topic {
		case schemas.TopicWebhookDeliveries:
			var t schemas.DeliveryTask
			if err := codec.Unmarshal(r.Value, &t); err != nil {
				return nil, stream.Poison(fmt.Errorf("delivery log record %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err))
			}
			rec.task = &t
			if t.Run == 1 {
				out = append(out, rec)
				continue
			}
			rest = append(rest, rec)
		case schemas.TopicWebhookAttempts:
			rest = append(rest, rec)
		default:
			facts = append(facts, rec)
		}
	}
	return append(append(out, rest...), facts...), nil
}

type round struct {
	tasks []schemas.DeliveryTask
	// firsts[i], when set, is the result of tasks[i]'s first attempt,
	// met in the same batch: the task's row is written with it applied.
	firsts  []*schemas.AttemptResult
	results []schemas.AttemptResult
}

// rounds collects a batch's tasks and results.
type rounds struct {
	list []round
	seen map[uuid.UUID]int // records of each delivery so far
	// open are the deliveries whose last record so far is the task of a
	// first run with no result yet: where that task sits.
	open map[uuid.UUID]taskAt
	// The webhooks the batch deleted.
	deleted []uuid.UUID
}

type taskAt struct{ round, index int }

func newRounds() *rounds {
	return &rounds{seen: map[uuid.UUID]int{}, open: map[uuid.UUID]taskAt{}}
}

func (w *rounds) round(id uuid.UUID) *round {
	i := w.seen[id]
	w.seen[id] = i + 1
	for len(w.list) <= i {
		w.list = append(w.list, round{})
	}
	return &w.list[i]
}

// add takes a record of the batch.
func (w *rounds) add(rec record) error {
	r := rec.r
	switch rec.topic {
	case schemas.TopicWebhookDeliveries:
		t := *rec.task
		n := w.seen[t.DeliveryID]
		rd := w.round(t.DeliveryID)
		rd.tasks = append(rd.tasks, t)
		rd.firsts = append(rd.firsts, nil)
		delete(w.open, t.DeliveryID)
		if t.Run == 1 {
			w.open[t.DeliveryID] = taskAt{round: n, index: len(rd.tasks) - 1}
		}
	case schemas.TopicWebhookAttempts:
		var res schemas.AttemptResult
		if err := codec.Unmarshal(r.Value, &res); err != nil {
			return err
		}
		if at, ok := w.open[res.DeliveryID]; ok && res.Run == 1 && res.Attempt == 1 && w.list[at.round].tasks[at.index].Gen == res.Gen {
			// The first attempt's result right after its task: one row
			// write for both. The result still goes in the task's round,
			// after the tasks, where it changes only a row that existed
			// before (a batch redone, a result met before its task).
			delete(w.open, res.DeliveryID)
			rd := &w.list[at.round]
			rd.firsts[at.index] = &res
			rd.results = append(rd.results, res)
			return nil
		}
		delete(w.open, res.DeliveryID)
		rd := w.round(res.DeliveryID)
		rd.results = append(rd.results, res)
	case schemas.TopicWebhookEvents:
		ev, err := schemas.ParseEvent(r.Value)
		if err != nil {
			return err
		}
		if ev.Type != schemas.TypeWebhookDeleted {
			return nil
		}
		var f schemas.WebhookFact
		if err := ev.Decode(&f); err != nil {
			return err
		}
		w.deleted = append(w.deleted, f.ID)
	}
	return nil
}

// flush queues what was collected: the rounds in order, then the
// deletions (which applyOrder put last).
func (w *rounds) flush(b *pgx.Batch) {
	for _, rd := range w.list {
		queueTasks(b, rd.tasks, rd.firsts)
		queueResults(b, rd.results)
	}
	if len(w.deleted) > 0 {
		b.Queue(`DELETE FROM webhook_deliveries WHERE webhook_id = ANY($1)`, w.deleted)
	}
}

// startsOver is when a task makes its delivery's row pending again, at
// no attempt: a new run (a resend), or the webhook's new generation (a
// fan-out batch redone after a disable and re-enable) of a delivery not
// delivered. A success stays: the client has the event.
const startsOver = `(webhook_deliveries.run < excluded.run OR webhook_deliveries.gen < excluded.gen AND webhook_deliveries.status <> 'success')`

// queueTasks records deliveries (first attempt of a run): new rows, or a
// newer run of a resent one, or the run again for a newer webhook
// generation (a fan-out batch redone after its webhook was disabled and
// enabled again, whose first try's copy the sender cancels; not over a
// success: startsOver). Deliveries of a webhook that no longer exists are
// not recorded. A new row of a task whose first result is in firsts is
// written with that result applied, as queueResults would have left it;
// only first runs are merged, so on a conflict (the row exists) the task
// alone applies, and the result's own upsert follows. An existing row the
// task would not change is not rewritten.
func queueTasks(b *pgx.Batch, ts []schemas.DeliveryTask, firsts []*schemas.AttemptResult) {
	if len(ts) == 0 {
		return
	}
	n := len(ts)
	ids, hooks, accounts, events := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n)
	topics, payloads, statuses := make([]string, n), make([]string, n), make([]string, n)
	runs, gens, attempts, runAttempts := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	codes, errs := make([]*int, n), make([]*string, n)
	next, delivered := make([]*time.Time, n), make([]*time.Time, n)
	created := make([]time.Time, n)
	for i, t := range ts {
		ids[i], hooks[i], accounts[i], events[i] = t.DeliveryID, t.WebhookID, t.AccountID, t.EventID
		topics[i], payloads[i], statuses[i] = t.Topic, string(t.Payload), schemas.DeliveryPending
		runs[i], gens[i] = int32(t.Run), int32(t.Gen)
		due := t.DueAt
		next[i], created[i] = &due, t.CreatedAt
		if r := firsts[i]; r != nil {
			statuses[i], runAttempts[i], errs[i], next[i] = r.Status, int32(r.Attempt), r.Error, r.NextRetryAt
			if r.Attempted {
				attempts[i], codes[i] = 1, r.StatusCode
			}
			if r.Status == schemas.DeliverySuccess {
				at := r.At
				delivered[i] = &at
			}
		}
	}
	b.Queue(`INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id, topic, payload, status, attempts, run,
			run_attempt, gen, last_status_code, last_error, next_retry_at, delivered_at, created_at)
		SELECT t.id, t.webhook_id, t.account_id, t.event_id, t.topic, t.payload::json, t.status, t.attempts, t.run,
			t.run_attempt, t.gen, t.code, t.error, t.next, t.delivered, t.created
		FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::text[], $7::text[], $8::int[], $9::int[],
			$10::int[], $11::int[], $12::int[], $13::text[], $14::timestamptz[], $15::timestamptz[], $16::timestamptz[])
			AS t(id, webhook_id, account_id, event_id, topic, payload, status, attempts, run, run_attempt, gen, code, error,
			next, delivered, created)
		WHERE EXISTS (SELECT 1 FROM webhooks WHERE id = t.webhook_id)
		ON CONFLICT (id) DO UPDATE SET
			payload = COALESCE(webhook_deliveries.payload, excluded.payload),
			status = CASE WHEN `+startsOver+` THEN 'pending' ELSE webhook_deliveries.status END,
			run_attempt = CASE WHEN `+startsOver+` THEN 0 ELSE webhook_deliveries.run_attempt END,
			next_retry_at = CASE WHEN `+startsOver+` THEN excluded.next_retry_at ELSE webhook_deliveries.next_retry_at END,
			gen = GREATEST(webhook_deliveries.gen, excluded.gen),
			run = GREATEST(webhook_deliveries.run, excluded.run),
			updated_at = now()
		WHERE webhook_deliveries.payload IS NULL OR webhook_deliveries.run < excluded.run
			OR webhook_deliveries.gen < excluded.gen`,
		ids, hooks, accounts, events, topics, payloads, statuses, attempts, runs, runAttempts, gens, codes, errs, next,
		delivered, created)
}

// queueResults applies attempt results once each: to its run, past the
// last attempt applied, and not over a cancelled or finished delivery (a
// success always counts: the client has the event); a result of a later
// run (its task not read yet) moves the row to that run. An attempt made
// again after a crash (the sender wrote its result but lost the record
// that goes with it, the next attempt's task or the dead letter, which go
// to other partitions) may end the delivery at the same attempt: a
// finishing result then applies over a pending one, and a success over
// any other. A result never applies at the row's attempt over one as far
// along, so a batch redone changes nothing. A result met before its task
// makes the row, without payload until the task fills it. A new row
// counts run_attempt attempts when a request was made and none
// otherwise (attempt numbers start at 1), so excluded.attempts > 0 tells
// an update whether this result was a request. A result of an older
// webhook generation than the row's (the cancelled copy of a task a
// redone fan-out emitted again) never applies; one of a newer generation
// applies at its run, as its task would.
func queueResults(b *pgx.Batch, rs []schemas.AttemptResult) {
	if len(rs) == 0 {
		return
	}
	n := len(rs)
	ids, hooks, accounts, events := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n)
	topics, statuses := make([]string, n), make([]string, n)
	attempts, runs, runAttempts, gens := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	codes, errs := make([]*int, n), make([]*string, n)
	next, delivered := make([]*time.Time, n), make([]*time.Time, n)
	created := make([]time.Time, n)
	for i, r := range rs {
		ids[i], hooks[i], accounts[i], events[i] = r.DeliveryID, r.WebhookID, r.AccountID, r.EventID
		topics[i], statuses[i] = r.Topic, r.Status
		if r.Attempted {
			attempts[i] = int32(r.Attempt)
		}
		runs[i], runAttempts[i], gens[i] = int32(r.Run), int32(r.Attempt), int32(r.Gen)
		codes[i], errs[i], next[i] = r.StatusCode, r.Error, r.NextRetryAt
		if r.Status == schemas.DeliverySuccess {
			at := r.At
			delivered[i] = &at
		}
		created[i] = r.CreatedAt
	}
	b.Queue(`INSERT INTO webhook_deliveries AS d (id, webhook_id, account_id, event_id, topic, status, attempts, run, run_attempt,
			gen, last_status_code, last_error, next_retry_at, delivered_at, created_at)
		SELECT r.* FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[], $6::text[], $7::int[], $8::int[],
			$9::int[], $10::int[], $11::int[], $12::text[], $13::timestamptz[], $14::timestamptz[], $15::timestamptz[])
			AS r(id, webhook_id, account_id, event_id, topic, status, attempts, run, run_attempt, gen, code, error, next, delivered, created)
		WHERE EXISTS (SELECT 1 FROM webhooks WHERE id = r.webhook_id)
		ON CONFLICT (id) DO UPDATE SET
			status = excluded.status,
			attempts = d.attempts + (excluded.attempts > 0)::int,
			run = excluded.run,
			run_attempt = excluded.run_attempt,
			last_status_code = CASE WHEN excluded.attempts > 0 THEN excluded.last_status_code ELSE d.last_status_code END,
			last_error = excluded.last_error,
			next_retry_at = excluded.next_retry_at,
			delivered_at = COALESCE(d.delivered_at, excluded.delivered_at),
			gen = GREATEST(d.gen, excluded.gen),
			updated_at = now()
		WHERE d.gen <= excluded.gen AND (d.run < excluded.run
			OR (d.run = excluded.run AND d.gen < excluded.gen AND (d.status <> 'success' OR excluded.status = 'success'))
			OR (d.run = excluded.run AND d.run_attempt < excluded.run_attempt
				AND (d.status = 'pending' OR excluded.status = 'success'))
			OR (d.run = excluded.run AND d.run_attempt = excluded.run_attempt
				AND ((d.status = 'pending' AND excluded.status <> 'pending')
					OR (excluded.status = 'success' AND d.status <> 'success'))))`,
		ids, hooks, accounts, events, topics, statuses, attempts, runs, runAttempts, gens, codes, errs, next, delivered, created)
}

// sweepChunk removes up to 5,000 delivery logs older than $1 (an interval),
// by the row versions the created_at index finds: not looked up again by
// id, which read three index blocks per row removed. A delivery whose run
// is under way (pending: a resend near the end of the 30 days runs up to
// about 21 hours) is kept until it ends: removed, its next result would
// make the row again with no payload and a wrong attempt count. One left
// pending two days after its last change (a run whose outcome was never
// recorded: its task dead-lettered) goes all the same.
const sweepChunk = `DELETE FROM webhook_deliveries WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM webhook_deliveries WHERE created_at < now() - $1::interval
		AND (status <> 'pending' OR updated_at < now() - interval '2 days') LIMIT 5000))`

// Sweep removes delivery logs older than retention, a chunk at a time, and
// returns how many it removed.
func Sweep(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) (int64, error) {
	var total int64
	for {
		tag, err := pool.Exec(ctx, sweepChunk, retention.String())
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
