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
// over is left to that next lease; the platform is not called.
func TestACallThatCouldOutlastItsLeaseIsNotStarted(t *testing.T) {
	var requests atomic.Int64
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "unexpected", http.StatusInternalServerError)
	}))
	defer platform.Close()
	w := &Worker{Platform: &Client{BaseURL: platform.URL}, Log: slog.New(slog.DiscardHandler)}
	c := call{job: jobs.Job{ID: uuid.New(), Step: order.StepCall, Attempt: 1, DueAt: time.Now().Add(callBudget / 2)},
		push: order.PushJob{StoreID: uuid.New(), IdempotencyKey: uuid.New()}, domain: "shop.example", known: true}
	done := 0
	w.call(context.Background(), c, func() { done++ })
	if done != 1 || requests.Load() != 0 {
		t.Fatalf("done %d times after %d platform requests; want done once, no request", done, requests.Load())
	}
}
