package push

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/testenv"
)

// shortLeases are leases of a second, renewed every 100 ms, a push
// stopped 300 ms before its lease ends.
func shortLeases(db pg.Querier) *leases {
	ls := newLeases(db, slog.New(slog.DiscardHandler))
	ls.term, ls.every, ls.margin = time.Second, 100*time.Millisecond, 300*time.Millisecond
	return ls
}

// TestAPushIsKeptLeasedWhileItIsWorked: a push worked longer than its
// lease keeps its job from every other claim, and once the decider moves
// the job on (here it ends it) the worker lets the push go.
func TestAPushIsKeptLeasedWhileItIsWorked(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ls := shortLeases(pool)
	id := uuid.New()
	w := jobs.NewWrites(order.PushQueue)
	w.Put(jobs.Job{ID: id, Step: order.StepStart, Attempt: 1, DueAt: time.Now()})
	queue(t, pool, w)
	from := time.Now()
	leased := claimPushes(t, pool, ls.term)
	if len(leased) != 1 {
		t.Fatalf("claimed %d jobs, want 1", len(leased))
	}
	l := ls.hold(ctx, leased[0], from)
	go ls.run(ctx)

	// Three leases' time later the push is still held, and no claim takes it.
	end := time.Now().Add(3 * ls.term)
	testenv.Eventually(t, 10*time.Second, func() error {
		if time.Now().Before(end) {
			if l.ctx.Err() != nil {
				t.Fatalf("the push was stopped while its lease could be renewed")
			}
			if got := claimPushes(t, pool, ls.term); len(got) != 0 {
				t.Fatalf("another claim took the job of a push still worked")
			}
			return testenv.Errorf("still %s to go", time.Until(end))
		}
		return nil
	})

	w = jobs.NewWrites(order.PushQueue)
	w.Delete(id)
	queue(t, pool, w)
	testenv.Eventually(t, 5*time.Second, func() error {
		if l.ctx.Err() == nil {
			return testenv.Errorf("the push is still held after its job ended")
		}
		return nil
	})
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.held) != 0 {
		t.Fatalf("the worker still keeps %d leases", len(ls.held))
	}
}

// TestAPushWhoseLeaseCannotBeRenewedStopsBeforeItEnds: with Postgres
// refusing connections, or taking them and never answering, no renewal
// goes through, and the push is stopped (its context ends) before its
// lease ends by the worker's clock, so no call of it is in flight when
// another worker may take the job.
func TestAPushWhoseLeaseCannotBeRenewedStopsBeforeItEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		db   pg.Querier
	}{
		{"Postgres refusing", unreachable{}},
		{"Postgres not answering", hanging{answer: make(chan struct{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if h, ok := tc.db.(hanging); ok {
				defer close(h.answer)
			}
			ls := shortLeases(tc.db)
			from := time.Now()
			l := ls.hold(ctx, jobs.Job{ID: uuid.New(), Step: order.StepStart, Attempt: 1, DueAt: from.Add(ls.term)}, from)
			go ls.run(ctx)
			select {
			case <-l.ctx.Done():
			case <-ctx.Done():
				t.Fatal("the push was never stopped")
			}
			if left := time.Until(from.Add(ls.term)); left <= 0 {
				t.Fatalf("the push was stopped %s after its lease ended", -left)
			}
		})
	}
}

// unreachable is a database that refuses every query.
type unreachable struct{}

func (unreachable) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("connection refused")
}

// hanging is a database that answers no query until answer is closed,
// deadline or not (a connection lost without a word).
type hanging struct{ answer chan struct{} }

func (h hanging) Query(context.Context, string, ...any) (pgx.Rows, error) {
	<-h.answer
	return nil, errors.New("connection reset")
}

func queue(t *testing.T, db *pgxpool.Pool, w *jobs.Writes) {
	t.Helper()
	b := &pgx.Batch{}
	w.Queue(b)
	if err := db.SendBatch(context.Background(), b).Close(); err != nil {
		t.Fatal(err)
	}
}

func claimPushes(t *testing.T, db *pgxpool.Pool, term time.Duration) []jobs.Job {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	got, err := jobs.Claim(ctx, tx, order.PushQueue, 10, term, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestAClaimThatTookTooLongHandsOutAStoppedLease: a claim whose lease ends
// within the stop margin by the time it is held (the claim's transaction
// was slow) gives a lease stopped at once, which the worker does not keep:
// the push is the next lease's, and no call races another worker's.
func TestAClaimThatTookTooLongHandsOutAStoppedLease(t *testing.T) {
	ls := newLeases(nil, slog.New(slog.DiscardHandler))
	j := jobs.Job{ID: uuid.New(), Step: order.StepStart, Attempt: 1}
	l := ls.hold(context.Background(), j, time.Now().Add(-ls.term+ls.margin/2))
	if l.ctx.Err() == nil {
		t.Fatal("a lease ending within the stop margin was handed out running")
	}
	if len(ls.held) != 0 {
		t.Fatalf("the worker keeps %d leases, want none", len(ls.held))
	}
	ls.end(l) // as the call does when it finds the lease stopped
	if fresh := ls.hold(context.Background(), j, time.Now()); fresh.ctx.Err() != nil || len(ls.held) != 1 {
		t.Fatalf("a fresh lease: stopped %v, %d kept; want running and kept", fresh.ctx.Err(), len(ls.held))
	}
}
