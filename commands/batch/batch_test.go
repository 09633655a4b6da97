package batch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/pgnotify"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/testenv"
)

// listening gives a test a Postgres pool and a listener on the job
// queue's channel, both until the test ends (the context ends first: the
// worker and the listener hold connections of the pool).
func listening(t *testing.T) (context.Context, *pgxpool.Pool, *pgnotify.Listener, *slog.Logger) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pool := pgtest.NewPool(t)
	t.Cleanup(cancel)
	log := slog.New(slog.DiscardHandler)
	notify := pgnotify.New(pool, log, jobs.Notify)
	go notify.Run(ctx)
	return ctx, pool, notify, log
}

// TestABatchIsWorkedOnceThroughTheJobQueue stores a batch of 40 items (3
// runs), works it with a Work whose item 17 is undecided the first time,
// and checks that every item is worked, the undecided one once more, and
// that no job is left.
func TestABatchIsWorkedOnceThroughTheJobQueue(t *testing.T) {
	ctx, pool, notify, log := listening(t)

	const n = 40
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"i":%d}`, i)
	}
	id, account := uuid.New(), uuid.New()
	if _, err := Store(ctx, pool, id, account, bodies); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	worked := map[int]int{}
	w := &Worker{Pool: pool, Notify: notify, Log: log, Work: func(_ context.Context, it Item) Result {
		mu.Lock()
		defer mu.Unlock()
		worked[it.Index]++
		if it.Account != account || string(it.Body) != fmt.Sprintf(`{"i":%d}`, it.Index) {
			t.Errorf("item %d: account %s, body %s", it.Index, it.Account, it.Body)
		}
		switch {
		case it.Index == 17 && worked[it.Index] == 1:
			return Result{} // undecided: worked again after retryAfter
		case it.Index%2 == 1:
			return Result{Status: 400, Error: []byte(`{"error":"VALIDATION_ERROR"}`)}
		}
		order := it.CommandID()
		return Result{Status: 201, OrderID: &order}
	}}
	go w.Run(ctx)

	testenv.Eventually(t, 30*time.Second, func() error {
		var done, left int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM order_batch_items WHERE done),
			(SELECT count(*) FROM jobs WHERE queue = $1)`, Queue).Scan(&done, &left); err != nil {
			return err
		}
		if done != n || left != 0 {
			return fmt.Errorf("%d of %d items done, %d jobs left", done, n, left)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		want := 1
		if i == 17 {
			want = 2
		}
		if worked[i] != want {
			t.Errorf("item %d worked %d times, want %d", i, worked[i], want)
		}
	}
	rows, err := pool.Query(ctx, `SELECT idx, http_status, order_id, result::text FROM order_batch_items WHERE batch_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var idx, status int
		var order *uuid.UUID
		var result *string
		if err := rows.Scan(&idx, &status, &order, &result); err != nil {
			t.Fatal(err)
		}
		ok := status == 201 && order != nil && *order == (Item{Batch: id, Index: idx}).CommandID() && result == nil
		if idx%2 == 1 {
			ok = status == 400 && order == nil && result != nil && *result == `{"error":"VALIDATION_ERROR"}`
		}
		if !ok {
			t.Errorf("item %d stored as %d %v %v", idx, status, order, result)
		}
	}
}

// TestAStoreSaysWhetherItMadeTheBatch: the intake answers a batch made now
// from what it stored, and only a repeat of its id reads the batch again.
func TestAStoreSaysWhetherItMadeTheBatch(t *testing.T) {
	ctx, pool, _, _ := listening(t)
	id, account := uuid.New(), uuid.New()
	first, err := Store(ctx, pool, id, account, [][]byte{[]byte(`{}`), []byte(`{}`)})
	if err != nil || !first.Made || first.CreatedAt.IsZero() {
		t.Fatalf("the first store: %+v, %v; want the batch made, with its time", first, err)
	}
	again, err := Store(ctx, pool, id, account, [][]byte{[]byte(`{}`), []byte(`{}`)})
	if err != nil || again.Made || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("the repeat: %+v, %v; want the batch found, made at %s", again, err, first.CreatedAt)
	}
	var items int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM order_batch_items WHERE batch_id = $1`, id).Scan(&items); err != nil || items != 2 {
		t.Fatalf("%d items stored (%v), want 2", items, err)
	}
}

// TestARoundIsWorkedWithinItsLease: an item is worked under a deadline
// that leaves its run leased long enough to store the result, and that
// gives it the longest an item's create can take.
func TestARoundIsWorkedWithinItsLease(t *testing.T) {
	// What finish's transaction may take, and the longest create: 3 × 10 s
	// soft duplicate waits, a 10 s send, 10 s for the decision and 10 s
	// for the projection.
	const storing, create = 10 * time.Second, 60 * time.Second
	ctx, pool, notify, log := listening(t)
	id := uuid.New()
	if _, err := Store(ctx, pool, id, uuid.New(), [][]byte{[]byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		deadline, leaseEnd time.Time
		ok                 bool
		err                error
	}
	worked := make(chan seen, 1)
	w := &Worker{Pool: pool, Notify: notify, Log: log, Work: func(ctx context.Context, it Item) Result {
		var s seen
		s.deadline, s.ok = ctx.Deadline()
		s.err = pool.QueryRow(ctx, `SELECT due_at FROM jobs WHERE queue = $1`, Queue).Scan(&s.leaseEnd)
		select {
		case worked <- s:
		default:
		}
		order := it.CommandID()
		return Result{Status: 201, OrderID: &order}
	}}
	go w.Run(ctx)
	var s seen
	select {
	case s = <-worked:
	case <-time.After(30 * time.Second):
		t.Fatal("the item was not worked")
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	if !s.ok {
		t.Fatalf("an item is worked with no deadline; its run's lease ends at %s", s.leaseEnd)
	}
	if left := s.leaseEnd.Sub(s.deadline); left < storing {
		t.Errorf("an item's work may end %s before its run's lease does; the results need %s", left, storing)
	}
	if room := time.Until(s.deadline); room < create {
		t.Errorf("an item's work has %s; its create can take %s", room, create)
	}
}

// TestFinishActsOnlyUnderItsLeaseAndKeepsTheFirstResult: a holder whose
// run another worker has leased since stores nothing and leaves the job
// alone, whatever its clock says; a holder whose items were stored
// meanwhile does not overwrite them.
func TestFinishActsOnlyUnderItsLeaseAndKeepsTheFirstResult(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	w := &Worker{Pool: pool, Log: slog.New(slog.DiscardHandler)}
	id := uuid.New()
	if _, err := Store(ctx, pool, id, uuid.New(), [][]byte{[]byte(`{}`), []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	leased, err := w.claim(ctx)
	if err != nil || len(leased) != 1 {
		t.Fatalf("claimed %d jobs (%v), want the run", len(leased), err)
	}
	runs := []runJob{{Batch: id, From: 0, To: 2}}
	items, err := w.pending(ctx, runs)
	if err != nil || len(items) != 2 {
		t.Fatalf("%d pending items (%v)", len(items), err)
	}
	first, other := uuid.New(), uuid.New()
	refused := Result{Status: 400, Error: []byte(`{"error":"VALIDATION_ERROR","message":"no"}`)}
	type row struct {
		Done   bool
		Status int
		Order  uuid.UUID
	}
	state := func() (items [2]row, attempt int, jobLeft bool) {
		t.Helper()
		for i := range items {
			r := &items[i]
			if err := pool.QueryRow(ctx, `SELECT done, coalesce(http_status, 0), coalesce(order_id, '00000000-0000-0000-0000-000000000000')
				FROM order_batch_items WHERE batch_id = $1 AND idx = $2`,
				id, i).Scan(&r.Done, &r.Status, &r.Order); err != nil {
				t.Fatal(err)
			}
		}
		err := pool.QueryRow(ctx, `SELECT attempt FROM jobs WHERE queue = $1`, Queue).Scan(&attempt)
		if err != nil && err != pgx.ErrNoRows {
			t.Fatal(err)
		}
		return items, attempt, err == nil
	}

	// The holder of the run: item 0 created, item 1 undecided.
	if err := w.finish(ctx, leased, runs, items, []Result{{Status: 201, OrderID: &first}, {}}); err != nil {
		t.Fatal(err)
	}
	got, attempt, left := state()
	if !got[0].Done || got[0].Order != first || got[1].Done || !left || attempt != 2 {
		t.Fatalf("after the holder's finish: items %+v, job left %v at attempt %d", got, left, attempt)
	}

	// The run comes due again and another worker leases it. The first
	// holder finishing late, even by a clock that says its lease holds,
	// changes nothing.
	if _, err := pool.Exec(ctx, `UPDATE jobs SET due_at = now() WHERE queue = $1`, Queue); err != nil {
		t.Fatal(err)
	}
	again, err := w.claim(ctx)
	if err != nil || len(again) != 1 {
		t.Fatalf("claimed %d jobs (%v) once the run came due again, want the run", len(again), err)
	}
	for _, stale := range []jobs.Job{leased[0], {ID: leased[0].ID, Attempt: leased[0].Attempt, DueAt: time.Now().Add(lease)}} {
		if err := w.finish(ctx, []jobs.Job{stale}, runs, items, []Result{refused, {Status: 201, OrderID: &other}}); err != nil {
			t.Fatal(err)
		}
		if now, attemptNow, leftNow := state(); now != got || leftNow != left || attemptNow != attempt {
			t.Fatalf("a holder whose lease was taken over (lease end %s) changed items %+v to %+v, job (%v, attempt %d) to (%v, attempt %d)",
				stale.DueAt, got, now, left, attempt, leftNow, attemptNow)
		}
	}

	// The current holder, whose item 0 was stored meanwhile.
	if err := w.finish(ctx, again, runs, items, []Result{refused, {Status: 201, OrderID: &other}}); err != nil {
		t.Fatal(err)
	}
	got, _, left = state()
	if got[0].Status != 201 || got[0].Order != first {
		t.Errorf("item 0's first result (201 %s) was overwritten: %d %s", first, got[0].Status, got[0].Order)
	}
	if !got[1].Done || got[1].Order != other || left {
		t.Errorf("item 1 %+v, job left %v; want item 1 created as %s and the job ended", got[1], left, other)
	}
}

// TestUndecidedItemsAreStoredAfterBoundedAttempts: an item answered with
// a 5xx is worked again with a growing delay (5 s doubling, at most a
// minute), and after the tenth attempt stored as failed with its 5xx body.
// An item whose command is on the log undecided, one whose send failed
// (the broker may have appended it all the same) and one not answered at
// all (it may be on the log from an earlier attempt) stay open past the
// tenth until they are answered, and are stored with that answer. So the
// batch completes, and each item's result matches its order. The test
// brings each wait to its end.
func TestUndecidedItemsAreStoredAfterBoundedAttempts(t *testing.T) {
	ctx, pool, notify, log := listening(t)
	id := uuid.New()
	if _, err := Store(ctx, pool, id, uuid.New(), [][]byte{[]byte(`{}`), []byte(`{}`), []byte(`{}`), []byte(`{}`), []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	unavailable := `{"error":"SERVICE_UNAVAILABLE","message":"the order log (Kafka) is unavailable; try again shortly"}`
	invalid := `{"error":"VALIDATION_ERROR","message":"unknown variant"}`
	var mu sync.Mutex
	worked := map[int]int{}
	w := &Worker{Pool: pool, Notify: notify, Log: log, Work: func(_ context.Context, it Item) Result {
		mu.Lock()
		defer mu.Unlock()
		worked[it.Index]++
		order := it.CommandID()
		switch it.Index {
		case 0:
			return Result{Status: 201, OrderID: &order}
		case 1:
			return Result{Status: 503, Error: []byte(unavailable)}
		case 2: // no answer in 12 rounds
			if worked[2] <= 12 {
				return Result{}
			}
			return Result{Status: 201, OrderID: &order}
		case 3: // its command is on the log; the decider is away for 12 attempts
			if worked[3] <= 12 {
				return Result{Status: 503, Error: []byte(unavailable), Undecided: true}
			}
			return Result{Status: 201, OrderID: &order}
		}
		// Its sends fail for 12 attempts; then the log is found not to
		// hold it, and it is checked again.
		if worked[4] <= 12 {
			return Result{Status: 503, Error: []byte(unavailable), SendFailed: true}
		}
		return Result{Status: 400, Error: []byte(invalid)}
	}}
	go w.Run(ctx)

	waits := map[int]time.Duration{} // before each attempt
	testenv.Eventually(t, 90*time.Second, func() error {
		// A run waiting for its next attempt (not one leased) is due now.
		var attempt int
		var wait time.Duration
		err := pool.QueryRow(ctx, `WITH w AS (SELECT id, attempt, due_at - now() AS wait FROM jobs
				WHERE queue = $1 AND due_at > now() AND due_at < now() + interval '90 seconds' FOR UPDATE)
			UPDATE jobs j SET due_at = now() FROM w WHERE j.queue = $1 AND j.id = w.id RETURNING w.attempt, w.wait`, Queue).Scan(&attempt, &wait)
		switch {
		case err == nil:
			if _, seen := waits[attempt]; !seen {
				waits[attempt] = wait
			}
		case err != pgx.ErrNoRows:
			return err
		}
		var done, left int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM order_batch_items WHERE batch_id = $2 AND done),
			(SELECT count(*) FROM jobs WHERE queue = $1)`, Queue, id).Scan(&done, &left); err != nil {
			return err
		}
		if done != 5 || left != 0 {
			return fmt.Errorf("%d of 5 items done, %d jobs left, waits so far %v", done, left, waits)
		}
		return nil
	})
	mu.Lock()
	if worked[0] != 1 || worked[1] != 10 || worked[2] != 13 || worked[3] != 13 || worked[4] != 13 {
		t.Errorf("items worked %v times; want 1, 10, 13, 13, 13", worked)
	}
	mu.Unlock()
	for attempt := 2; attempt <= 10; attempt++ {
		want := min(5*time.Second<<(attempt-2), time.Minute)
		if got, ok := waits[attempt]; !ok || got > want || got < want-3*time.Second {
			t.Errorf("wait before attempt %d: %v (seen %v); want about %v", attempt, got, ok, want)
		}
	}
	rows, err := pool.Query(ctx, `SELECT idx, http_status, order_id IS NOT NULL, result::text FROM order_batch_items WHERE batch_id = $1 ORDER BY idx`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var idx, status int
		var order bool
		var result *string
		if err := rows.Scan(&idx, &status, &order, &result); err != nil {
			t.Fatal(err)
		}
		switch {
		case idx == 0 && status == 201 && order:
		case idx == 1 && status == 503 && !order && result != nil && *result == unavailable:
		case idx == 2 && status == 201 && order:
		case idx == 3 && status == 201 && order:
		case idx == 4 && status == 400 && !order && result != nil && *result == invalid:
		default:
			t.Errorf("item %d stored as %d, order %v, %v", idx, status, order, result)
		}
	}
}

// TestAJobWhosePayloadCannotBeReadEndsAtOnce: a batch job whose payload
// names no run is dropped the first time it is leased, and the runs leased
// beside it are worked as usual.
func TestAJobWhosePayloadCannotBeReadEndsAtOnce(t *testing.T) {
	ctx, pool, notify, log := listening(t)
	bad := uuid.New()
	writes := jobs.NewWrites(Queue)
	writes.Put(jobs.Job{ID: bad, Step: stepWork, Attempt: 1, DueAt: time.Now().Add(-time.Minute), Payload: []byte(`{"batch":"nope"}`)})
	b := &pgx.Batch{}
	writes.Queue(b)
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	if _, err := Store(ctx, pool, id, uuid.New(), [][]byte{[]byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	w := &Worker{Pool: pool, Notify: notify, Log: log, Concurrency: 2 * run, Work: func(_ context.Context, it Item) Result {
		order := it.CommandID()
		return Result{Status: 201, OrderID: &order}
	}}
	go w.Run(ctx)
	testenv.Eventually(t, 20*time.Second, func() error {
		var done bool
		var left int
		if err := pool.QueryRow(ctx, `SELECT (SELECT done FROM order_batch_items WHERE batch_id = $2),
			(SELECT count(*) FROM jobs WHERE queue = $1)`, Queue, id).Scan(&done, &left); err != nil {
			return err
		}
		if !done || left != 0 {
			return fmt.Errorf("the good run's item done: %v; %d jobs left", done, left)
		}
		return nil
	})
}

// TestFinishedBatchesAreDeletedAfterTheRetention: a batch older than the
// retention whose items are all done goes with its items; one as old with
// an item still open, and one done but younger, stay.
func TestFinishedBatchesAreDeletedAfterTheRetention(t *testing.T) {
	ctx, pool, _, _ := listening(t)
	account := uuid.New()
	type batch struct {
		name string
		age  time.Duration
		open bool
		kept bool
	}
	batches := []batch{
		{"a finished batch past the retention is deleted", Retention + time.Hour, false, false},
		{"a batch past the retention with an open item is kept", Retention + time.Hour, true, true},
		{"a finished batch within the retention is kept", Retention - time.Hour, false, true},
	}
	ids := make([]uuid.UUID, len(batches))
	for i, b := range batches {
		ids[i] = uuid.New()
		if _, err := Store(ctx, pool, ids[i], account, [][]byte{[]byte(`{}`), []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE order_batches SET created_at = now() - $2::interval WHERE batch_id = $1`, ids[i], b.age.String()); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE order_batch_items SET done = true WHERE batch_id = $1 AND (idx = 0 OR NOT $2)`, ids[i], b.open); err != nil {
			t.Fatal(err)
		}
	}
	deleted, err := Prune(ctx, pool, Retention)
	if err != nil {
		t.Fatal(err)
	}
	if deleted != 1 {
		t.Errorf("%d batches deleted, want 1", deleted)
	}
	for i, b := range batches {
		var batches, items int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM order_batches WHERE batch_id = $1),
			(SELECT count(*) FROM order_batch_items WHERE batch_id = $1)`, ids[i]).Scan(&batches, &items); err != nil {
			t.Fatal(err)
		}
		if kept := batches == 1 && items == 2; kept != b.kept || (!kept && items != 0) {
			t.Errorf("%s: %d batch rows and %d items left", b.name, batches, items)
		}
	}
}

// TestAnItemWhoseCreatePanicsIsWorkedAgainNotACrash: a create that panics
// on one item's body leaves the worker (and the process) running. The
// round's other items are stored, and the item stays open for the run's
// next attempt.
func TestAnItemWhoseCreatePanicsIsWorkedAgainNotACrash(t *testing.T) {
	ctx, pool, notify, log := listening(t)
	id := uuid.New()
	if _, err := Store(ctx, pool, id, uuid.New(), [][]byte{[]byte(`{}`), []byte(`{"bad":true}`)}); err != nil {
		t.Fatal(err)
	}
	var panics sync.WaitGroup
	panics.Add(1)
	w := &Worker{Pool: pool, Notify: notify, Log: log, Work: func(_ context.Context, it Item) Result {
		if it.Index == 1 {
			defer panics.Done()
			panic("a body no create expected")
		}
		order := it.CommandID()
		return Result{Status: 201, OrderID: &order}
	}}
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	panics.Wait()
	testenv.Eventually(t, 30*time.Second, func() error {
		var stored, open, attempt int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM order_batch_items WHERE batch_id = $2 AND done AND http_status = 201),
			(SELECT count(*) FROM order_batch_items WHERE batch_id = $2 AND NOT done),
			(SELECT coalesce(max(attempt), 0) FROM jobs WHERE queue = $1)`, Queue, id).Scan(&stored, &open, &attempt); err != nil {
			return err
		}
		if stored != 1 || open != 1 || attempt != 2 {
			return fmt.Errorf("%d items stored, %d open, the run at attempt %d; want 1, 1 and 2", stored, open, attempt)
		}
		return nil
	})
	select {
	case <-done:
		t.Fatal("the worker stopped")
	default:
	}
}

// TestALeaseThatEndsUnfinishedLeavesNoLogEndToTheNext: a run's log end is
// the target its lookups wait for the decider to reach, kept from round
// to round while its items only wait. A lease that ends before its finish
// may have sent creates past that target: the next lease must read the
// log's end again, or it would take those creates for not on the log.
// A lease that finishes writes its target back.
func TestALeaseThatEndsUnfinishedLeavesNoLogEndToTheNext(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	w := &Worker{Pool: pool, Log: slog.New(slog.DiscardHandler)}
	id := uuid.New()
	if _, err := Store(ctx, pool, id, uuid.New(), [][]byte{[]byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE jobs SET payload = payload || '{"worked": true, "log_end": {"0": 41}}' WHERE queue = $1`, Queue); err != nil {
		t.Fatal(err)
	}
	leased, err := w.claim(ctx)
	if err != nil || len(leased) != 1 {
		t.Fatalf("claimed %d jobs (%v), want the run", len(leased), err)
	}
	var run runJob
	if err := codec.Unmarshal(leased[0].Payload, &run); err != nil || run.LogEnd[0] != 41 {
		t.Fatalf("the lease holds log end %v (%v), want the stored one, 41", run.LogEnd, err)
	}
	stored := func() runJob {
		t.Helper()
		var payload []byte
		if err := pool.QueryRow(ctx, `SELECT payload FROM jobs WHERE queue = $1`, Queue).Scan(&payload); err != nil {
			t.Fatal(err)
		}
		var r runJob
		if err := codec.Unmarshal(payload, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := stored(); r.LogEnd != nil || !r.Worked {
		t.Fatalf("while leased the job stores log end %v, worked %v; want none, and worked", r.LogEnd, r.Worked)
	}
	items, err := w.pending(ctx, []runJob{run})
	if err != nil || len(items) != 1 {
		t.Fatalf("%d pending items (%v)", len(items), err)
	}
	// Its one item got no answer: the run stays open with its target.
	if err := w.finish(ctx, leased, []runJob{run}, items, []Result{{}}); err != nil {
		t.Fatal(err)
	}
	if r := stored(); r.LogEnd[0] != 41 {
		t.Fatalf("after the finish the job stores log end %v, want 41 again", r.LogEnd)
	}
}

// TestADecidedFailureIsStoredAtOnce: a 5xx that is its create's decision
// (a create refused as it was dead-lettered) is the item's outcome: stored
// in the round that got it, not worked again for minutes.
func TestADecidedFailureIsStoredAtOnce(t *testing.T) {
	ctx, pool, notify, log := listening(t)
	id := uuid.New()
	if _, err := Store(ctx, pool, id, uuid.New(), [][]byte{[]byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	refused := `{"error":"INTERNAL_ERROR","message":"the order was not created"}`
	var worked sync.WaitGroup
	worked.Add(1)
	w := &Worker{Pool: pool, Notify: notify, Log: log, Work: func(_ context.Context, it Item) Result {
		defer worked.Done()
		return Result{Status: 500, Error: []byte(refused), Decided: true}
	}}
	go w.Run(ctx)
	worked.Wait()
	testenv.Eventually(t, 30*time.Second, func() error {
		var status, jobsLeft int
		var result string
		if err := pool.QueryRow(ctx, `SELECT coalesce(http_status, 0), coalesce(result::text, ''), (SELECT count(*) FROM jobs WHERE queue = $2)
			FROM order_batch_items WHERE batch_id = $1`, id, Queue).Scan(&status, &result, &jobsLeft); err != nil {
			return err
		}
		if status != 500 || result != refused || jobsLeft != 0 {
			return fmt.Errorf("item stored as %d %q, %d jobs left; want 500, the refusal, none", status, result, jobsLeft)
		}
		return nil
	})
}
