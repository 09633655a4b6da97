package push

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/pgtest"
)

// TestAPushWhoseLeaseWasLostMakesNoCall: a call handed to a worker after
// the push's lease was lost (not renewed in time, or taken by another) is
// left to the job's next lease; the platform is not called.
func TestAPushWhoseLeaseWasLostMakesNoCall(t *testing.T) {
	w, requests := workerOfARefusingPlatform(t)
	j := jobs.Job{ID: uuid.New(), Step: order.StepStart, Attempt: 1, DueAt: time.Now().Add(lease)}
	c := call{job: j, lease: w.leases.hold(context.Background(), j, time.Now()),
		push: order.PushJob{StoreID: uuid.New(), IdempotencyKey: uuid.New()}, domain: "shop.example", known: true}
	c.lease.cancel() // as the leases do when one is lost
	done := 0
	w.call(context.Background(), c, func() { done++ })
	if done != 1 || requests.Load() != 0 {
		t.Fatalf("done %d times after %d platform requests; want done once, no request", done, requests.Load())
	}
	if n := len(w.leases.held); n != 0 {
		t.Fatalf("the worker still keeps %d leases", n)
	}
}

// TestAWorkerStopsWaitingForItsStartWhenItsLeaseIsLost: a worker waits
// for its start_push's decision while the push stays leased to it; once
// the lease is lost the call is the takeover's, and the worker stops
// waiting.
func TestAWorkerStopsWaitingForItsStartWhenItsLeaseIsLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w := &Worker{Log: slog.New(slog.DiscardHandler), leases: newLeases(nil, slog.New(slog.DiscardHandler))}
	j := jobs.Job{ID: uuid.New(), Step: order.StepStart, Attempt: 1, DueAt: time.Now().Add(lease)}
	st := started{call: call{job: j, lease: w.leases.hold(ctx, j, time.Now())}, command: uuid.New(), wake: make(chan string), stop: func() {}}
	time.AfterFunc(100*time.Millisecond, st.lease.cancel)
	if w.decided(ctx, &order.Bus{}, st) {
		t.Fatal("the call was made without a decision")
	}
	if ctx.Err() != nil {
		t.Fatal("the worker waited on after its lease was lost")
	}
}

// TestAWakeWithoutTheOutcomesDecisionKeepsThePushLeased: the worker keeps
// a push's lease until its outcome is decided. A wake that carries no
// decision (every waiter is woken when the listener connects again) is
// not one: the outcome is looked up, and the wait goes on until it is
// found.
func TestAWakeWithoutTheOutcomesDecisionKeepsThePushLeased(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &Worker{Pool: pool, Log: slog.New(slog.DiscardHandler)}
	outcome := uuid.New()
	wake := make(chan string, 1)
	wake <- ""
	if w.awaitOutcome(ctx, wake, outcome, 500*time.Millisecond) {
		t.Fatal("a wake without a decision, none in the table, ended the wait as decided")
	}
	if _, err := pool.Exec(ctx, `INSERT INTO order_decisions (command_id, order_id, status, version) VALUES ($1, gen_random_uuid(), 'FAILED', 3)`,
		outcome); err != nil {
		t.Fatal(err)
	}
	wake <- ""
	if !w.awaitOutcome(ctx, wake, outcome, 10*time.Second) {
		t.Fatal("a wake once the outcome is in the table did not end the wait as decided")
	}
	wake <- `{"c":"` + outcome.String() + `","v":3}`
	if !w.awaitOutcome(ctx, wake, outcome, 10*time.Second) {
		t.Fatal("the outcome's announcement did not end the wait as decided")
	}
}

// TestAStoppingWorkerStartsNoCallNotUnderWay: once the worker stops, a
// push still waiting for its start's decision stops waiting, and a call
// not started is given back, due at once for another worker, though its
// lease (kept while the worker drains) still holds. Before, it was left
// to the lease's end, 40 s on every deploy (found by review).
func TestAStoppingWorkerStartsNoCallNotUnderWay(t *testing.T) {
	w, requests := workerOfARefusingPlatform(t)
	pool := pgtest.NewPool(t)
	w.leases = newLeases(pool, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	run, stop := context.WithCancel(ctx)
	stop() // the worker is stopping; its drain goes on
	wr := jobs.NewWrites(order.PushQueue)
	wr.Put(jobs.Job{ID: uuid.New(), Step: order.StepStart, Attempt: 1, DueAt: time.Now().Add(-time.Minute), Payload: []byte(`{}`)})
	queue(t, pool, wr)
	leased := claimPushes(t, pool, lease)
	if len(leased) != 1 {
		t.Fatalf("%d pushes leased, want 1", len(leased))
	}
	j := leased[0]
	st := started{call: call{job: j, lease: w.leases.hold(ctx, j, time.Now())}, command: uuid.New(), wake: make(chan string), stop: func() {}}
	if w.decided(run, &order.Bus{}, st) {
		t.Fatal("a start waiting for its decision went on after the worker stopped")
	}
	if ctx.Err() != nil {
		t.Fatal("the start waited on after the worker stopped")
	}
	c := call{job: j, lease: w.leases.hold(ctx, j, time.Now()),
		push: order.PushJob{StoreID: uuid.New(), IdempotencyKey: uuid.New()}, domain: "shop.example", known: true}
	done := 0
	w.call(run, c, func() { done++ })
	if done != 1 || requests.Load() != 0 || len(w.leases.held) != 0 {
		t.Fatalf("done %d times after %d platform requests, %d leases kept; want done once, no request, none kept",
			done, requests.Load(), len(w.leases.held))
	}
	if again := claimPushes(t, pool, lease); len(again) != 1 || again[0].ID != j.ID {
		t.Fatalf("a claim right after the stop leased %d pushes, want the one not started, given back", len(again))
	}
}

// workerOfARefusingPlatform is a worker whose platform answers every
// request 500, and how many it got: for tests that want no call.
func workerOfARefusingPlatform(t *testing.T) (*Worker, *atomic.Int64) {
	requests := new(atomic.Int64)
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "unexpected", http.StatusInternalServerError)
	}))
	t.Cleanup(platform.Close)
	return &Worker{Platform: &Client{BaseURL: platform.URL}, Log: slog.New(slog.DiscardHandler),
		leases: newLeases(nil, slog.New(slog.DiscardHandler))}, requests
}
