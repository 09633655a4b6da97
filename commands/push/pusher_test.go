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
)

// TestACallThatCouldOutlastItsLeaseIsNotStarted: a call handed to a
// worker so late that its job could be leased again before the call is
// over and its outcome decided is left to that next lease; the platform
// is not called.
func TestACallThatCouldOutlastItsLeaseIsNotStarted(t *testing.T) {
	var requests atomic.Int64
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "unexpected", http.StatusInternalServerError)
	}))
	defer platform.Close()
	w := &Worker{Platform: &Client{BaseURL: platform.URL}, Log: slog.New(slog.DiscardHandler)}
	c := call{job: jobs.Job{ID: uuid.New(), Step: order.StepStart, Attempt: 1, DueAt: time.Now().Add(callBudget + outcomeBudget/2)},
		push: order.PushJob{StoreID: uuid.New(), IdempotencyKey: uuid.New()}, domain: "shop.example", known: true}
	done := 0
	w.call(context.Background(), c, func() { done++ })
	if done != 1 || requests.Load() != 0 {
		t.Fatalf("done %d times after %d platform requests; want done once, no request", done, requests.Load())
	}
}

// TestAStartUndecidedWhileACallCouldStartIsLeftToTheTakeover: a worker
// waits for its start_push's decision only while a call could still be
// made within the job's lease; after that the call is the takeover's, once
// the lease ends, and the worker stops waiting.
func TestAStartUndecidedWhileACallCouldStartIsLeftToTheTakeover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w := &Worker{Log: slog.New(slog.DiscardHandler)}
	st := started{call: call{job: jobs.Job{ID: uuid.New(), Step: order.StepStart, Attempt: 1, DueAt: time.Now().Add(callBudget + outcomeBudget + 100*time.Millisecond)}},
		command: uuid.New(), wake: make(chan string), stop: func() {}}
	if w.decided(ctx, &order.Bus{}, st) {
		t.Fatal("the call was made without a decision")
	}
	if ctx.Err() != nil {
		t.Fatal("the worker waited past the time a call could start")
	}
}

// TestAWorkerHoldsOnlyThePushesItsCallsCanStartInTime: at the platform's
// recent call time, a worker leases no more pushes than its calls can
// start within half their start window, at least one per call, and never
// more than its room.
func TestAWorkerHoldsOnlyThePushesItsCallsCanStartInTime(t *testing.T) {
	const room = 264
	for _, tc := range []struct {
		name  string
		calls []time.Duration // the platform calls made so far
		want  int
	}{
		{"before any call the worker fills its room", nil, room},
		{"at 2 ms a call the room is the bound", []time.Duration{2 * time.Millisecond}, room},
		{"at 5 s a call, 16 calls start 96 pushes in 30 s", []time.Duration{5 * time.Second}, 96},
		{"at 10 minutes a call it holds one push per call", []time.Duration{10 * time.Minute}, 16},
		{"the average moves an eighth of the way to each call", []time.Duration{5 * time.Second, 13 * time.Second}, 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Worker{Calls: 16}
			for _, took := range tc.calls {
				w.timed(took)
			}
			if got := w.holding(room); got != tc.want {
				t.Errorf("holds %d pushes, want %d", got, tc.want)
			}
		})
	}
}
