package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTheLogRowIsTheSameHoweverItsRecordsAreBatched applies the records
// of deliveries (a task and its results, a result met before its task, a
// resend) split into batches every way the tests below name, twice each
// (a batch redone), and checks that each delivery's row is the same as
// when every record is its own batch.
func TestTheLogRowIsTheSameHoweverItsRecordsAreBatched(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	f := newLogFixture(t, pool)
	task, result := f.task, f.result
	histories := map[string]func(d uuid.UUID) []*kgo.Record{
		"delivered at once": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{task(d, 1), result(d, 1, 1, schemas.DeliverySuccess)}
		},
		"failed, then delivered": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{task(d, 1), result(d, 1, 1, schemas.DeliveryPending), result(d, 1, 2, schemas.DeliverySuccess)}
		},
		"result met before its task": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{result(d, 1, 1, schemas.DeliveryPending), task(d, 1), result(d, 1, 2, schemas.DeliverySuccess)}
		},
		"failed, resent, delivered": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{task(d, 1), result(d, 1, 1, schemas.DeliveryFailed), task(d, 2), result(d, 2, 1, schemas.DeliverySuccess)}
		},
		// The sender writes an attempt's result and its next task in one
		// produce, to two partitions: killed between their acks, it leaves
		// the result without the task, and makes the attempt again.
		"an attempt made again after a crash lost its next task": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{task(d, 1), result(d, 1, 1, schemas.DeliveryPending), result(d, 1, 2, schemas.DeliveryPending),
				result(d, 1, 2, schemas.DeliverySuccess)}
		},
		// A fan-out batch redone after its webhook was disabled and
		// enabled again emits the task again for the new generation; the
		// first try's copy is worked too, and cancelled.
		"a fan-out redone for a new generation, its old copy cancelled first": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{f.taskOf(d, 1, 1), f.resultOf(d, 1, 1, 1, schemas.DeliveryCancelled), f.taskOf(d, 1, 2),
				f.resultOf(d, 1, 1, 2, schemas.DeliveryPending), f.resultOf(d, 1, 2, 2, schemas.DeliverySuccess)}
		},
		"a fan-out redone for a new generation, its old copy cancelled after the new task": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{f.taskOf(d, 1, 1), f.taskOf(d, 1, 2), f.resultOf(d, 1, 1, 1, schemas.DeliveryCancelled),
				f.resultOf(d, 1, 1, 2, schemas.DeliveryPending), f.resultOf(d, 1, 2, 2, schemas.DeliverySuccess)}
		},
		// Likewise with the last attempt's failure and its dead letter.
		"the last attempt made again after a crash lost its dead letter": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{task(d, 1), result(d, 1, 1, schemas.DeliveryPending), result(d, 1, 2, schemas.DeliveryFailed),
				result(d, 1, 2, schemas.DeliverySuccess)}
		},
	}
	apply := func(recs []*kgo.Record) { f.apply(t, pool, recs) }
	for name, history := range histories {
		want := uuid.New()
		for _, r := range history(want) {
			apply([]*kgo.Record{r})
		}
		wantRow := row(t, pool, want)
		// Every history ends in a delivery.
		var status string
		if err := pool.QueryRow(ctx, `SELECT status FROM webhook_deliveries WHERE id = $1`, want).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if status != schemas.DeliverySuccess {
			t.Errorf("%s: status %s after its records one a batch, want %s", name, status, schemas.DeliverySuccess)
		}
		splits := map[string]func([]*kgo.Record) [][]*kgo.Record{
			"one batch": func(rs []*kgo.Record) [][]*kgo.Record { return [][]*kgo.Record{rs} },
			"the first two, then the rest": func(rs []*kgo.Record) [][]*kgo.Record {
				return [][]*kgo.Record{rs[:2], rs[2:]}
			},
			"the first, then the rest": func(rs []*kgo.Record) [][]*kgo.Record {
				return [][]*kgo.Record{rs[:1], rs[1:]}
			},
		}
		for split, cut := range splits {
			d := uuid.New()
			for range 2 { // the second time, a redone batch
				for _, batch := range cut(history(d)) {
					apply(batch)
				}
			}
			if got := row(t, pool, d); got != wantRow {
				t.Errorf("%s, %s: row\n%s\nwant (one record a batch)\n%s", name, split, got, wantRow)
			}
		}
	}
}

// TestAnOldGenerationsCopyDoesNotEndTheNewOnesDelivery: a fan-out batch
// redone after its webhook was disabled and enabled again put a delivery's
// task on the log for both generations, and the sender cancels the old
// one's copy. Whichever comes first, the row follows the new generation's
// attempts: pending while they go on, failed when they fail.
func TestAnOldGenerationsCopyDoesNotEndTheNewOnesDelivery(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	f := newLogFixture(t, pool)
	status := func(d uuid.UUID) string {
		var s string
		if err := pool.QueryRow(ctx, `SELECT status FROM webhook_deliveries WHERE id = $1`, d).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for name, records := range map[string]func(d uuid.UUID) []*kgo.Record{
		"the old copy cancelled before the new task": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{f.taskOf(d, 1, 1), f.resultOf(d, 1, 1, 1, schemas.DeliveryCancelled), f.taskOf(d, 1, 2),
				f.resultOf(d, 1, 1, 2, schemas.DeliveryPending)}
		},
		"the old copy cancelled after the new task": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{f.taskOf(d, 1, 1), f.taskOf(d, 1, 2), f.resultOf(d, 1, 1, 1, schemas.DeliveryCancelled),
				f.resultOf(d, 1, 1, 2, schemas.DeliveryPending)}
		},
		"the old copy cancelled after the new attempt": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{f.taskOf(d, 1, 1), f.taskOf(d, 1, 2), f.resultOf(d, 1, 1, 2, schemas.DeliveryPending),
				f.resultOf(d, 1, 1, 1, schemas.DeliveryCancelled)}
		},
	} {
		d := uuid.New()
		for _, r := range records(d) {
			f.apply(t, pool, []*kgo.Record{r})
		}
		if got := status(d); got != schemas.DeliveryPending {
			t.Errorf("%s: status %s while the new generation's attempts go on, want %s", name, got, schemas.DeliveryPending)
		}
		f.apply(t, pool, []*kgo.Record{f.resultOf(d, 1, 2, 2, schemas.DeliveryFailed)})
		if got := status(d); got != schemas.DeliveryFailed {
			t.Errorf("%s: status %s after the new generation's last attempt failed, want %s", name, got, schemas.DeliveryFailed)
		}
	}
}

// TestADeliveredDeliveryStaysDeliveredThroughANewGenerationsCopy: a
// fan-out batch redone after its webhook was disabled and enabled again
// puts a new generation's task of a delivery on the log after the old
// one's was delivered (found by review: the row went back to pending, and
// to failed if the copy failed, though the client has the event). A
// success stays; a resend (a new run) still starts over.
func TestADeliveredDeliveryStaysDeliveredThroughANewGenerationsCopy(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	f := newLogFixture(t, pool)
	var status string
	var runAttempt int
	var d uuid.UUID
	for name, records := range map[string]func(d uuid.UUID) []*kgo.Record{
		"the copy's task": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{f.taskOf(d, 1, 1), f.resultOf(d, 1, 1, 1, schemas.DeliverySuccess), f.taskOf(d, 1, 2)}
		},
		"the copy's failed attempt met before its task": func(d uuid.UUID) []*kgo.Record {
			return []*kgo.Record{f.taskOf(d, 1, 1), f.resultOf(d, 1, 1, 1, schemas.DeliverySuccess),
				f.resultOf(d, 1, 1, 2, schemas.DeliveryPending), f.taskOf(d, 1, 2)}
		},
	} {
		d = uuid.New()
		for _, r := range records(d) {
			f.apply(t, pool, []*kgo.Record{r})
		}
		if err := pool.QueryRow(ctx, `SELECT status, run_attempt FROM webhook_deliveries WHERE id = $1`, d).Scan(&status, &runAttempt); err != nil {
			t.Fatal(err)
		}
		if status != schemas.DeliverySuccess || runAttempt != 1 {
			t.Fatalf("after %s: %s at attempt %d, want %s at 1", name, status, runAttempt, schemas.DeliverySuccess)
		}
	}
	f.apply(t, pool, []*kgo.Record{f.taskOf(d, 2, 2)})
	if err := pool.QueryRow(ctx, `SELECT status FROM webhook_deliveries WHERE id = $1`, d).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != schemas.DeliveryPending {
		t.Fatalf("after a resend: %s, want %s", status, schemas.DeliveryPending)
	}
}

// TestAPendingDeliveryReadsCancelledOnceItsWebhookIsNoLongerActive: a
// disable changes no row of the log; a delivery waiting for its next
// attempt reads cancelled (no next retry) from then on, as the sender's
// cancelled result will leave it, through a re-enable (a new generation)
// until a resend starts a new run. A finished delivery reads as it is.
func TestAPendingDeliveryReadsCancelledOnceItsWebhookIsNoLongerActive(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	f := newLogFixture(t, pool)
	failed, waiting := uuid.New(), uuid.New()
	batch := []*kgo.Record{f.task(failed, 1)}
	for attempt := 1; attempt < 7; attempt++ {
		batch = append(batch, f.result(failed, 1, attempt, schemas.DeliveryPending))
	}
	batch = append(batch, f.result(failed, 1, 7, schemas.DeliveryFailed), f.result(waiting, 1, 1, schemas.DeliveryPending),
		f.task(waiting, 1))
	f.apply(t, pool, batch)
	stored := row(t, pool, waiting)

	type read struct {
		status    string
		attempts  int
		lastError string
		retry     bool // next_retry_at set
	}
	get := func(id uuid.UUID) read {
		t.Helper()
		r, ok, err := f.q.Get(ctx, f.account, f.hook, id)
		if err != nil || !ok {
			t.Fatalf("get delivery %s: %v (found %v)", id, err, ok)
		}
		var msg string
		if r.LastError != nil {
			msg = *r.LastError
		}
		return read{r.Status, r.Attempts, msg, r.NextRetryAt != nil}
	}
	listed := func(status string) []uuid.UUID {
		t.Helper()
		rs, _, err := f.q.List(ctx, f.account, f.hook, status, nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uuid.UUID
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	webhook := func(active bool, gen int) {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE webhooks SET is_active = $2, gen = $3 WHERE id = $1`, f.hook, active, gen); err != nil {
			t.Fatal(err)
		}
	}
	cancelled := read{schemas.DeliveryCancelled, 1, "webhook_disabled", false}
	for _, step := range []struct {
		name    string
		do      func()
		waiting read
	}{
		{"while its webhook is active", func() {}, read{schemas.DeliveryPending, 1, "HTTP 500", true}},
		{"once its webhook is disabled", func() { webhook(false, 1) }, cancelled},
		{"once its webhook is enabled again at a new generation", func() { webhook(true, 2) }, cancelled},
		{"once the sender cancels its task", func() {
			f.apply(t, pool, []*kgo.Record{f.resultOf(waiting, 1, 2, 1, schemas.DeliveryCancelled)})
		}, read{schemas.DeliveryCancelled, 1, "webhook_disabled", false}},
	} {
		step.do()
		if got := get(waiting); got != step.waiting {
			t.Errorf("%s, the delivery waiting for its next attempt reads %+v, want %+v", step.name, got, step.waiting)
		}
		if got, want := get(failed), (read{schemas.DeliveryFailed, 7, "HTTP 500", false}); got != want {
			t.Errorf("%s, the delivery whose last attempt failed reads %+v, want %+v", step.name, got, want)
		}
		byStatus := map[string]uuid.UUID{step.waiting.status: waiting, schemas.DeliveryFailed: failed}
		for _, status := range []string{schemas.DeliveryPending, schemas.DeliveryCancelled, schemas.DeliveryFailed} {
			var want []uuid.UUID
			if id, ok := byStatus[status]; ok {
				want = []uuid.UUID{id}
			}
			if got := listed(status); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s, the list of %s deliveries is %v, want %v", step.name, status, got, want)
			}
		}
		if step.name == "once its webhook is enabled again at a new generation" {
			if got := row(t, pool, waiting); got != stored {
				t.Errorf("the disable and the re-enable changed the waiting delivery's row:\n%s\nwas\n%s", got, stored)
			}
		}
	}
}

// TestAResendStartsANewRunOfADeliveryShownCancelled: a delivery still
// pending in its row but shown cancelled (its webhook was disabled and
// enabled again) can be resent; its old task's cancelled result, applied
// after, does not end the new run.
func TestAResendStartsANewRunOfADeliveryShownCancelled(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	f := newLogFixture(t, pool)
	d := uuid.New()
	f.apply(t, pool, []*kgo.Record{f.task(d, 1), f.result(d, 1, 1, schemas.DeliveryPending)})
	if _, err := pool.Exec(ctx, `UPDATE webhooks SET gen = 2 WHERE id = $1`, f.hook); err != nil {
		t.Fatal(err)
	}
	before, ok, err := f.q.Get(ctx, f.account, f.hook, d)
	if err != nil || !ok || before.Status != schemas.DeliveryCancelled {
		t.Fatalf("before the resend the delivery reads %+v (%v, found %v), want cancelled", before, err, ok)
	}
	again, ok, err := f.q.Requeued(ctx, before, 2, 2, f.at.Add(time.Hour))
	if err != nil || !ok || again.Status != schemas.DeliveryPending || again.Run != 2 || again.Gen != 2 {
		t.Fatalf("the resend gave %+v (%v, requeued %v), want pending at run 2 of generation 2", again, err, ok)
	}
	if _, ok, err := f.q.Requeued(ctx, before, 2, 2, f.at.Add(time.Hour)); err != nil || ok {
		t.Fatalf("a second resend of the same run was requeued (%v), want refused", err)
	}
	f.apply(t, pool, []*kgo.Record{f.resultOf(d, 1, 2, 1, schemas.DeliveryCancelled)})
	if after, _, err := f.q.Get(ctx, f.account, f.hook, d); err != nil || after.Status != schemas.DeliveryPending || after.Run != 2 {
		t.Fatalf("after the old task's cancelled result the delivery reads %+v (%v), want pending at run 2", after, err)
	}
}

// logFixture makes the records of one webhook's deliveries.
type logFixture struct {
	q             Queries // the log's queries, on the test's pool
	n             schemas.Naming
	hook, account uuid.UUID
	at            time.Time
	handle        func(context.Context, pgx.Tx, []*kgo.Record) ([]*kgo.Record, error)
}

// newLogFixture records an active webhook (generation 1) to make them for.
func newLogFixture(t *testing.T, pool *pgxpool.Pool) logFixture {
	t.Helper()
	f := logFixture{q: Queries{Pool: pool}, hook: uuid.New(), account: uuid.New(), at: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	f.handle = Projector(f.n, slog.New(slog.DiscardHandler)).Handle
	if _, err := pool.Exec(context.Background(), `INSERT INTO webhooks (id, account_id, url, topics, is_active, gen, secret, created_at, updated_at)
		VALUES ($1, $2, 'https://example.com/h', '{order.created}', true, 1, 's', now(), now())`, f.hook, f.account); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f logFixture) task(d uuid.UUID, run int) *kgo.Record { return f.taskOf(d, run, 1) }

// taskOf is the task of delivery d's run for the webhook's generation gen.
func (f logFixture) taskOf(d uuid.UUID, run, gen int) *kgo.Record {
	v, _ := json.Marshal(schemas.DeliveryTask{DeliveryID: d, WebhookID: f.hook, AccountID: f.account, EventID: d, Topic: "order.created",
		Gen: gen, Run: run, Attempt: 1, DueAt: f.at.Add(time.Duration(run) * time.Minute), CreatedAt: f.at, Payload: json.RawMessage(`{"id":1}`)})
	return &kgo.Record{Topic: f.n.Topic(schemas.TopicWebhookDeliveries), Value: v}
}

func (f logFixture) result(d uuid.UUID, run, attempt int, status string) *kgo.Record {
	return f.resultOf(d, run, attempt, 1, status)
}

// resultOf is the result of an attempt of delivery d's run, for the
// webhook's generation gen; a cancelled one made no request.
func (f logFixture) resultOf(d uuid.UUID, run, attempt, gen int, status string) *kgo.Record {
	code := 500
	r := schemas.AttemptResult{DeliveryID: d, WebhookID: f.hook, AccountID: f.account, EventID: d, Topic: "order.created", Gen: gen,
		Run: run, Attempt: attempt, Attempted: true, Status: status, StatusCode: &code, At: f.at.Add(time.Duration(attempt) * time.Second), CreatedAt: f.at}
	if status == schemas.DeliveryCancelled {
		msg := "webhook_disabled"
		r.Attempted, r.StatusCode, r.Error = false, nil, &msg
	} else if status == schemas.DeliverySuccess {
		code = 200
	} else if status == schemas.DeliveryPending {
		next := f.at.Add(time.Hour)
		msg := "HTTP 500"
		r.NextRetryAt, r.Error = &next, &msg
	} else {
		msg := "HTTP 500"
		r.Error = &msg
	}
	v, _ := json.Marshal(r)
	return &kgo.Record{Topic: f.n.Topic(schemas.TopicWebhookAttempts), Value: v}
}

// apply applies recs as one batch.
func (f logFixture) apply(t *testing.T, pool *pgxpool.Pool, recs []*kgo.Record) {
	t.Helper()
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := f.handle(ctx, tx, recs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// row is a delivery's row without its id and updated_at.
func row(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), `SELECT (to_jsonb(d) - 'id' - 'event_id' - 'updated_at')::text
		FROM webhook_deliveries d WHERE id = $1`, id).Scan(&s); err != nil {
		t.Fatal(fmt.Errorf("delivery %s: %w", id, err))
	}
	return s
}

// TestAFilteredPageLooksThroughAtMostFilterScanDeliveries: a failed
// delivery behind more than FilterScan successes is not looked for in one
// request; the first page is empty and resumes where it stopped, and the
// next finds it.
func TestAFilteredPageLooksThroughAtMostFilterScanDeliveries(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	f := newLogFixture(t, pool)
	failed := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id, topic, status, gen, created_at)
		VALUES ($1, $2, $3, $1, 'order.created', 'failed', 1, $4)`, failed, f.hook, f.account, f.at); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id, topic, status, gen, created_at)
		SELECT gen_random_uuid(), $1, $2, gen_random_uuid(), 'order.created', 'success', 1, $3::timestamptz + i * interval '1 second'
		FROM generate_series(1, $4) AS i`, f.hook, f.account, f.at, FilterScan+5); err != nil {
		t.Fatal(err)
	}
	recs, resume, err := f.q.List(ctx, f.account, f.hook, schemas.DeliveryFailed, nil, 21)
	if err != nil {
		t.Fatal(err)
	}
	wantResume := f.at.Add(6 * time.Second) // the FilterScan-th newest
	if len(recs) != 0 || resume == nil || !resume.CreatedAt.Equal(wantResume) {
		t.Fatalf("the first page holds %d deliveries and resumes at %+v, want none and to resume at %s", len(recs), resume, wantResume)
	}
	recs, resume, err = f.q.List(ctx, f.account, f.hook, schemas.DeliveryFailed, resume, 21)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].ID != failed || resume != nil {
		t.Fatalf("the second page holds %d deliveries and resumes at %+v, want the failed one and no resume", len(recs), resume)
	}
	recs, resume, err = f.q.List(ctx, f.account, f.hook, "", nil, 21)
	if err != nil || len(recs) != 21 || resume != nil {
		t.Fatalf("an unfiltered page holds %d deliveries and resumes at %+v (%v), want 21 and no resume", len(recs), resume, err)
	}
}
