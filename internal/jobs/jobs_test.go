package jobs

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/testenv"
)

func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t)
}

func write(t *testing.T, pool *pgxpool.Pool, w *Writes) {
	t.Helper()
	b := &pgx.Batch{}
	w.Queue(b)
	if err := pool.SendBatch(context.Background(), b).Close(); err != nil {
		t.Fatal(err)
	}
}

func claim(t *testing.T, pool *pgxpool.Pool, n int, lease time.Duration) []Job {
	t.Helper()
	return claimPicked(t, pool, n, lease, nil)
}

// claimPicked claims with pick.
func claimPicked(t *testing.T, pool *pgxpool.Pool, n int, lease time.Duration, pick func(Job) bool) []Job {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	got, err := Claim(ctx, tx, "q", n, lease, pick)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return got
}

// ids are the jobs' ids, sorted: a claim picks the oldest due, in no
// particular order among them.
func ids(js []Job) []uuid.UUID {
	out := make([]uuid.UUID, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	slices.SortFunc(out, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return out
}

func sorted(in ...uuid.UUID) []uuid.UUID {
	slices.SortFunc(in, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return in
}

// TestClaimLeasesDueJobsOldestFirst: a claim takes due jobs in due order,
// up to its size; a leased job is not claimed again until its lease ends;
// a parked or future job is never claimed; other queues are apart.
func TestClaimLeasesDueJobsOldestFirst(t *testing.T) {
	pool := setup(t)
	now := time.Now()
	a, b, c, future, parked := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	w := NewWrites("q")
	w.Put(Job{ID: c, Step: "s", DueAt: now.Add(-time.Second), Payload: []byte(`{"n":3}`)})
	w.Put(Job{ID: a, Step: "s", DueAt: now.Add(-3 * time.Second), Payload: []byte(`{"n":1}`)})
	w.Put(Job{ID: b, Step: "s", DueAt: now.Add(-2 * time.Second), Payload: []byte(`{"n":2}`)})
	w.Put(Job{ID: future, Step: "s", DueAt: now.Add(time.Hour)})
	w.Put(Job{ID: parked, Step: "parked", DueAt: Parked})
	write(t, pool, w)
	other := NewWrites("other")
	other.Put(Job{ID: uuid.New(), Step: "s", DueAt: now.Add(-time.Hour)})
	write(t, pool, other)

	if got := ids(claim(t, pool, 2, time.Minute)); !slices.Equal(got, sorted(a, b)) {
		t.Fatalf("first claim took %v, want the two oldest %v", got, sorted(a, b))
	}
	got := claim(t, pool, 10, 300*time.Millisecond)
	if !slices.Equal(ids(got), []uuid.UUID{c}) {
		t.Fatalf("second claim took %v, want only %v (the others are leased, future or parked)", ids(got), c)
	}
	if string(got[0].Payload) != `{"n": 3}` {
		t.Errorf("payload %s", got[0].Payload)
	}
	if got := claim(t, pool, 10, time.Minute); len(got) != 0 {
		t.Fatalf("a third claim took %v while everything due is leased", ids(got))
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if got := ids(claim(t, pool, 10, time.Minute)); !slices.Equal(got, []uuid.UUID{c}) {
			return testenv.Errorf("after the short lease ended, a claim took %v, want %v", got, c)
		}
		return nil
	})
}

// TestAClaimLeavesDueTheJobsItDoesNotPick: of the due jobs a claim reads,
// those its pick leaves stay due for the next claim; those it takes are
// leased, with what they carry.
func TestAClaimLeavesDueTheJobsItDoesNotPick(t *testing.T) {
	pool := setup(t)
	past := time.Now().Add(-time.Minute)
	taken, left := uuid.New(), uuid.New()
	w := NewWrites("q")
	w.Put(Job{ID: taken, Step: "take", Attempt: 2, DueAt: past, Payload: []byte(`{"n":1}`)})
	w.Put(Job{ID: left, Step: "leave", Attempt: 1, DueAt: past.Add(time.Second)})
	write(t, pool, w)

	var seen []uuid.UUID
	got := claimPicked(t, pool, 10, time.Minute, func(j Job) bool {
		seen = append(seen, j.ID)
		return j.Step == "take"
	})
	if !slices.Equal(seen, []uuid.UUID{taken, left}) {
		t.Fatalf("the pick saw %v, want both due jobs oldest first", seen)
	}
	if len(got) != 1 || got[0].ID != taken || got[0].Attempt != 2 || string(got[0].Payload) != `{"n": 1}` || time.Until(got[0].DueAt) < 50*time.Second {
		t.Fatalf("claimed %+v, want the job picked, leased for a minute", got)
	}
	if got := ids(claim(t, pool, 10, time.Minute)); !slices.Equal(got, []uuid.UUID{left}) {
		t.Fatalf("the next claim took %v, want the job the first left due", got)
	}
}

// TestPutKeepsThePayloadAndDeleteWins: a Put without a payload moves a
// job to its next step and keeps what it carries; the last change to an
// id in one Writes wins.
func TestPutKeepsThePayloadAndDeleteWins(t *testing.T) {
	pool := setup(t)
	past := time.Now().Add(-time.Minute)
	kept, gone := uuid.New(), uuid.New()
	w := NewWrites("q")
	w.Put(Job{ID: kept, Step: "start", Attempt: 1, DueAt: past, Payload: []byte(`{"order":"x"}`)})
	w.Put(Job{ID: gone, Step: "start", Attempt: 1, DueAt: past, Payload: []byte(`{}`)})
	write(t, pool, w)

	w = NewWrites("q")
	w.Put(Job{ID: kept, Step: "call", Attempt: 2, DueAt: past})
	w.Put(Job{ID: gone, Step: "call", Attempt: 2, DueAt: past})
	w.Delete(gone)
	write(t, pool, w)

	got := claim(t, pool, 10, time.Minute)
	if len(got) != 1 || got[0].ID != kept {
		t.Fatalf("claimed %v, want only %v", ids(got), kept)
	}
	if j := got[0]; j.Step != "call" || j.Attempt != 2 || string(j.Payload) != `{"order": "x"}` {
		t.Errorf("job after its move: step %s attempt %d payload %s", j.Step, j.Attempt, j.Payload)
	}
}

// TestAJobIsHeldOnlyUnderItsCurrentLease: a worker whose lease another
// claim has taken over since holds none of its jobs, nor a job that was
// ended; under the current lease every job is held, even one whose lease
// ended with no other claim, and stays locked against claims until the
// holder's transaction ends.
func TestAJobIsHeldOnlyUnderItsCurrentLease(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	a, b, ended := uuid.New(), uuid.New(), uuid.New()
	w := NewWrites("q")
	for _, id := range []uuid.UUID{a, b, ended} {
		w.Put(Job{ID: id, Step: "s", Attempt: 1, DueAt: time.Now()})
	}
	write(t, pool, w)
	first := claim(t, pool, 10, 200*time.Millisecond)
	var second []Job
	testenv.Eventually(t, 5*time.Second, func() error {
		if second = claim(t, pool, 10, 200*time.Millisecond); len(second) != 3 {
			return testenv.Errorf("after the first lease ended a claim took %v, want all three jobs", ids(second))
		}
		return nil
	})
	w = NewWrites("q")
	w.Delete(ended)
	write(t, pool, w)
	hold := func(leased []Job) (held []uuid.UUID, tx pgx.Tx) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(ctx) })
		got, err := Hold(ctx, tx, "q", leased)
		if err != nil {
			t.Fatal(err)
		}
		return sorted(slices.Collect(maps.Keys(got))...), tx
	}
	if held, tx := hold(first); len(held) != 0 {
		t.Fatalf("a worker whose lease was taken over holds %v", held)
	} else {
		tx.Rollback(ctx)
	}
	// The second lease ends with no claim after it: its worker, late,
	// still holds its jobs.
	testenv.Eventually(t, 5*time.Second, func() error {
		var due int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE queue = 'q' AND due_at <= now()`).Scan(&due); err != nil || due != 2 {
			return testenv.Errorf("%d jobs due (%v), want the second lease over", due, err)
		}
		return nil
	})
	held, tx := hold(second)
	if !slices.Equal(held, sorted(a, b)) {
		t.Fatalf("under the current lease the worker holds %v, want %v (the ended job is gone)", held, sorted(a, b))
	}
	if got := claim(t, pool, 10, time.Minute); len(got) != 0 {
		t.Fatalf("a claim leased %v while their holder's transaction was open", ids(got))
	}
	tx.Rollback(ctx)
	if got := ids(claim(t, pool, 10, time.Minute)); !slices.Equal(got, sorted(a, b)) {
		t.Fatalf("after the holder's transaction ended a claim took %v, want %v", got, sorted(a, b))
	}
}

// explain is the plan of sql with args, made in tx.
func explain(t *testing.T, tx pgx.Tx, sql string, args ...any) string {
	t.Helper()
	rows, err := tx.Query(context.Background(), "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestOnlyTheClaimReadsTheDueIndex: the due index serves the claim and
// nothing else. A job delete that could read it was once planned as a scan
// of the whole queue's entries there (every lease's dead one since the
// last vacuum, 11,000 heap pages a delete) when a churning table's
// statistics made that look as cheap as the primary key. Here the primary
// key is taken away (in a transaction rolled back) and sequential scans
// are priced out: a delete still never turns to the due index, while the
// claim reads it.
func TestOnlyTheClaimReadsTheDueIndex(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	w := NewWrites("q")
	for range 50 {
		w.Put(Job{ID: uuid.New(), Step: "s", Attempt: 1, DueAt: time.Now()})
	}
	write(t, pool, w)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, q := range []string{`ANALYZE jobs`, `SET LOCAL enable_seqscan = off`} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if plan := explain(t, tx, claimDue, "q", 10); !strings.Contains(plan, "jobs_due") {
		t.Errorf("the claim does not read jobs_due:\n%s", plan)
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE jobs DROP CONSTRAINT jobs_pkey`); err != nil {
		t.Fatal(err)
	}
	if plan := explain(t, tx, deleteJobs, "q", []uuid.UUID{uuid.New(), uuid.New()}); strings.Contains(plan, "jobs_due") {
		t.Errorf("a delete reads jobs_due:\n%s", plan)
	}
}

// TestADeleteFindsItsJobsByID: a delete names its jobs by id, and its plan
// must look them up by id. A queue churns: at any time it holds a few live
// jobs among the dead versions its puts, leases and deletes leave until a
// vacuum. With such statistics Postgres preferred reading the primary key
// for the queue alone and filtering the ids, which reads every one of
// those entries: up to 10 million blocks in a 60 s run at 1,000 orders/s.
func TestADeleteFindsItsJobsByID(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `ALTER TABLE jobs SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	w := NewWrites("q")
	var gone []uuid.UUID
	for i := range 5000 {
		id := uuid.New()
		w.Put(Job{ID: id, Step: "s", Attempt: 1, DueAt: time.Now()})
		if i >= 14 {
			gone = append(gone, id)
		}
	}
	write(t, pool, w)
	if _, err := pool.Exec(ctx, deleteJobs, "q", gone); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// In production the dead versions fill thousands of pages, which
	// prices a sequential scan out; here they fill a few hundred.
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	for name, statement := range map[string]string{"the delete": deleteJobs, "the hold": holdLeased, "the renewal": renewLeased} {
		args := []any{"q", gone[:47]}
		switch statement {
		case holdLeased:
			args = append(args, make([]time.Time, 47))
		case renewLeased:
			args = append(args, make([]time.Time, 47), "1 minute")
		}
		plan := explain(t, tx, statement, args...)
		if !strings.Contains(plan, "Index Cond: ((id = ANY") {
			t.Errorf("%s does not look its jobs up by id:\n%s", name, plan)
		}
		// The renewal reads jobs three times (lock, update, answer): each
		// by id.
		if statement == renewLeased && strings.Count(plan, "Index Cond: ((id = ") != 3 {
			t.Errorf("%s does not look its jobs up by id each time it reads them:\n%s", name, plan)
		}
	}
}

// leaseThenMove puts a due job of each of ended, taken and held, leases
// them all for lease and returns the leases. Then the job ended is ended
// and the job taken is leased by another worker, as happens to a holder's
// jobs behind its back.
func leaseThenMove(t *testing.T, pool *pgxpool.Pool, lease time.Duration, ended, taken uuid.UUID, held ...uuid.UUID) []Job {
	t.Helper()
	w := NewWrites("q")
	for _, id := range append([]uuid.UUID{ended, taken}, held...) {
		w.Put(Job{ID: id, Step: "s", Attempt: 1, DueAt: time.Now()})
	}
	write(t, pool, w)
	leased := claim(t, pool, 10, lease)
	if len(leased) != 2+len(held) {
		t.Fatalf("leased %d jobs, want %d", len(leased), 2+len(held))
	}
	w = NewWrites("q")
	w.Delete(ended)
	write(t, pool, w)
	if _, err := pool.Exec(context.Background(), `UPDATE jobs SET due_at = now() + interval '5 minutes' WHERE queue = 'q' AND id = $1`, taken); err != nil {
		t.Fatal(err)
	}
	return leased
}

// TestALeaseIsRenewedOnlyWhileItsHolderStillHasIt: renewing moves a held
// job's lease ahead; a job ended or leased by another since is lost to
// its old holder; a job another transaction holds locked (the decider
// writing it) is left as it was, neither renewed nor lost, and renewed
// once the lock is gone.
func TestALeaseIsRenewedOnlyWhileItsHolderStillHasIt(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	kept, locked, ended, taken := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	leased := leaseThenMove(t, pool, time.Minute, ended, taken, kept, locked)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE queue = 'q' AND id = $1 FOR UPDATE`, locked); err != nil {
		t.Fatal(err)
	}

	renewed, lost, err := Renew(ctx, pool, "q", leased, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(renewed); !slices.Equal(got, sorted(kept)) {
		t.Fatalf("renewed %v, want only %v", got, kept)
	}
	if renewed[0].DueAt.Before(time.Now().Add(50*time.Minute)) || renewed[0].Step != "s" {
		t.Fatalf("the renewed job is %+v; want it due in about an hour, its step kept", renewed[0])
	}
	if got := sorted(lost...); !slices.Equal(got, sorted(ended, taken)) {
		t.Fatalf("lost %v, want the ended and the taken job %v", got, sorted(ended, taken))
	}
	var due time.Time
	if err := pool.QueryRow(ctx, `SELECT due_at FROM jobs WHERE queue = 'q' AND id = $1`, taken).Scan(&due); err != nil || time.Until(due) < 4*time.Minute {
		t.Fatalf("the job another worker leased is due at %s (%v); want its lease left alone", due, err)
	}

	tx.Rollback(ctx)
	var lockedJob Job
	for _, j := range leased {
		if j.ID == locked {
			lockedJob = j
		}
	}
	renewed, lost, err = Renew(ctx, pool, "q", []Job{lockedJob}, time.Hour)
	if err != nil || len(renewed) != 1 || len(lost) != 0 {
		t.Fatalf("once unlocked: renewed %v, lost %v (%v); want it renewed", ids(renewed), lost, err)
	}
}

// listen is a connection of pool listening on Notify, released when the
// test ends.
func listen(t *testing.T, pool *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(context.Background(), `LISTEN `+Notify); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestALeaseIsGivenBackOnlyByItsHolder: Return makes the jobs still under
// the lease it names due at once and announces the queue; a job another
// worker has leased since, or that was ended, is left as it is.
func TestALeaseIsGivenBackOnlyByItsHolder(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	back, ended, taken := uuid.New(), uuid.New(), uuid.New()
	leased := leaseThenMove(t, pool, time.Hour, ended, taken, back)
	conn := listen(t, pool)

	n, err := Return(ctx, pool, "q", leased, 0)
	if err != nil || n != 1 {
		t.Fatalf("gave back %d jobs (%v), want 1", n, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if note, err := conn.Conn().WaitForNotification(wctx); err != nil || note.Payload != "q" {
		t.Fatalf("no announcement of the queue (%v)", err)
	}
	if got := ids(claim(t, pool, 10, time.Hour)); !slices.Equal(got, sorted(back)) {
		t.Fatalf("a claim after the return leased %v, want only the job given back, %v", got, back)
	}
}

// TestALeaseGivenBackForLaterComesDueThen: a worker shedding a slow
// store's pushes gives them back due a few seconds on, not at once (a
// claim would take them straight back) nor at their lease's end (40 s
// late when the store was not slow after all). Nothing is announced: the
// jobs are not due yet.
func TestALeaseGivenBackForLaterComesDueThen(t *testing.T) {
	pool := setup(t)
	ctx := context.Background()
	back, ended, taken := uuid.New(), uuid.New(), uuid.New()
	leased := leaseThenMove(t, pool, time.Hour, ended, taken, back)
	conn := listen(t, pool)
	const after = 2 * time.Second
	before := time.Now()
	if n, err := Return(ctx, pool, "q", leased, after); err != nil || n != 1 {
		t.Fatalf("gave back %d jobs (%v), want 1", n, err)
	}
	if got := claim(t, pool, 10, time.Hour); len(got) != 0 {
		t.Fatalf("a claim right after the return leased %v, want none: they come due after %s", ids(got), after)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if note, err := conn.Conn().WaitForNotification(wctx); err == nil {
		t.Fatalf("the queue was announced (%q) for jobs not yet due", note.Payload)
	}
	var due time.Time
	if err := pool.QueryRow(ctx, `SELECT due_at FROM jobs WHERE queue = 'q' AND id = $1`, back).Scan(&due); err != nil {
		t.Fatal(err)
	}
	if lo, hi := before.Add(after-time.Second), time.Now().Add(after+time.Second); due.Before(lo) || due.After(hi) {
		t.Fatalf("due at %s, want about %s after the return (%s)", due.Format(time.RFC3339Nano), after, before.Format(time.RFC3339Nano))
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := ids(claim(t, pool, 10, time.Hour)); !slices.Equal(got, sorted(back)) {
			return fmt.Errorf("a claim leased %v, want the job given back, %v", got, back)
		}
		return nil
	})
}
