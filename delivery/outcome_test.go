package delivery

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/schemas"
)

func TestOutcome(t *testing.T) {
	created := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	now := created.Add(time.Minute)
	answered := now.Add(300 * time.Millisecond)
	delays := []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour}
	task := func(attempt int) schemas.DeliveryTask {
		return schemas.DeliveryTask{DeliveryID: uuid.MustParse("6f1f7a52-8a5e-4ab2-9b0a-2f7d0a1c0001"),
			WebhookID: uuid.MustParse("6f1f7a52-8a5e-4ab2-9b0a-2f7d0a1c0002"), AccountID: uuid.MustParse("6f1f7a52-8a5e-4ab2-9b0a-2f7d0a1c0003"),
			EventID: uuid.MustParse("6f1f7a52-8a5e-4ab2-9b0a-2f7d0a1c0004"), Topic: "order.created", Gen: 3, Run: 1, Attempt: attempt,
			CreatedAt: created, DueAt: created}
	}
	// result is the attempt result every case starts from.
	result := func(attempt int) schemas.AttemptResult {
		t := task(attempt)
		return schemas.AttemptResult{DeliveryID: t.DeliveryID, WebhookID: t.WebhookID, AccountID: t.AccountID, EventID: t.EventID,
			Topic: t.Topic, Gen: 3, Run: 1, Attempt: attempt, At: answered, CreatedAt: created, Attempted: true}
	}
	str := func(s string) *string { return &s }
	code := func(c int) *int { return &c }
	nextOf := func(attempt int, wait time.Duration) *schemas.DeliveryTask {
		n := task(attempt + 1)
		n.DueAt = answered.Add(wait)
		return &n
	}

	for _, tc := range []struct {
		name   string
		task   schemas.DeliveryTask
		active bool
		sent   Attempted
		want   func() Verdict
	}{
		{"a 2xx is a success and resets the endpoint's streak", task(1), true, Attempted{Code: 204, At: answered},
			func() Verdict {
				r := result(1)
				r.Status, r.StatusCode = schemas.DeliverySuccess, code(204)
				return Verdict{Result: r, Streak: StreakReset, Metric: "success"}
			}},
		{"a failed first attempt waits a minute in the first tier", task(1), true, Attempted{Code: 500, Failure: "HTTP 500", At: answered},
			func() Verdict {
				r := result(1)
				n := nextOf(1, time.Minute)
				r.Status, r.StatusCode, r.Error, r.NextRetryAt = schemas.DeliveryPending, code(500), str("HTTP 500"), &n.DueAt
				return Verdict{Result: r, Next: n, NextTier: 0, Metric: "retry"}
			}},
		{"a timeout with no answer has no status code and retries", task(3), true, Attempted{Failure: "timeout: no response within 5s", At: answered},
			func() Verdict {
				r := result(3)
				n := nextOf(3, 30*time.Minute)
				r.Status, r.Error, r.NextRetryAt = schemas.DeliveryPending, str("timeout: no response within 5s"), &n.DueAt
				return Verdict{Result: r, Next: n, NextTier: 2, Metric: "retry"}
			}},
		{"a failed sixth attempt waits twelve hours in the last tier", task(6), true, Attempted{Code: 503, Failure: "HTTP 503", At: answered},
			func() Verdict {
				r := result(6)
				n := nextOf(6, 12*time.Hour)
				r.Status, r.StatusCode, r.Error, r.NextRetryAt = schemas.DeliveryPending, code(503), str("HTTP 503"), &n.DueAt
				return Verdict{Result: r, Next: n, NextTier: 5, Metric: "retry"}
			}},
		{"a failed seventh attempt fails the delivery, dead-letters it and counts a failed run", task(7), true, Attempted{Code: 404, Failure: "HTTP 404", At: answered},
			func() Verdict {
				r := result(7)
				r.Status, r.StatusCode, r.Error = schemas.DeliveryFailed, code(404), str("HTTP 404")
				return Verdict{Result: r, DeadLetter: true, Streak: StreakFailed, Metric: "failed"}
			}},
		{"an attempt that could not be signed is retried as a failure, not made, and keeps the endpoint's streak", task(2), true,
			Attempted{Unsent: true, At: answered},
			func() Verdict {
				r := result(2)
				n := nextOf(2, 5*time.Minute)
				r.Attempted, r.Status, r.Error, r.NextRetryAt = false, schemas.DeliveryPending, str(FailureUnsigned), &n.DueAt
				return Verdict{Result: r, Next: n, NextTier: 1, Metric: "retry"}
			}},
		{"a seventh attempt that could not be signed dead-letters the delivery without counting a failed run", task(7), true,
			Attempted{Unsent: true, At: answered},
			func() Verdict {
				r := result(7)
				r.Attempted, r.Status, r.Error = false, schemas.DeliveryFailed, str(FailureUnsigned)
				return Verdict{Result: r, DeadLetter: true, Streak: StreakKept, Metric: "failed"}
			}},
		{"a redirect is a failure with its status", task(1), true, Attempted{Code: 302, Failure: "HTTP 302: redirects are not followed", At: answered},
			func() Verdict {
				r := result(1)
				n := nextOf(1, time.Minute)
				r.Status, r.StatusCode, r.Error, r.NextRetryAt = schemas.DeliveryPending, code(302), str("HTTP 302: redirects are not followed"), &n.DueAt
				return Verdict{Result: r, Next: n, NextTier: 0, Metric: "retry"}
			}},
		{"an inactive webhook's delivery is cancelled without a request", task(2), false, Attempted{},
			func() Verdict {
				r := result(2)
				r.Attempted, r.At = false, now
				r.Status, r.Error = schemas.DeliveryCancelled, str("webhook_disabled")
				return Verdict{Result: r, Metric: "cancelled"}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Outcome(tc.task, tc.active, tc.sent, now, delays)
			if want := tc.want(); !reflect.DeepEqual(got, want) {
				t.Fatalf("Outcome =\n  %+v\nwant\n  %+v", got, want)
			}
		})
	}
}

func TestEndpointLimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		heard   bool
		latency time.Duration
		want    int
	}{
		{"an endpoint none of whose attempts has ended has one request out", false, 0, 1},
		{"an endpoint whose attempts made no request keeps to the base", true, 0, 8},
		{"a fast endpoint may have eight times as many in flight", true, 10 * time.Millisecond, 64},
		{"one just under the fast bound is fast", true, FastAnswer - time.Millisecond, 64},
		{"a slow endpoint keeps to the base", true, FastAnswer, 8},
		{"a timing-out endpoint keeps to the base", true, 10 * time.Second, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &endpoint{latency: tc.latency, heard: tc.heard}
			if got := e.limit(8); got != tc.want {
				t.Fatalf("limit %d, want %d", got, tc.want)
			}
		})
	}
}

// TestAnEndpointHoldsWhatItWorksWithinSlowDrain: a slow endpoint (its
// answer time, or how long it has gone without an answer, at SlowAnswer or
// more) holds as many waiting tasks as it works within SlowDrain, and its
// deferred tasks wait for the time it would take for MaxQueuedPerEndpoint.
func TestAnEndpointHoldsWhatItWorksWithinSlowDrain(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name      string
		latency   time.Duration
		inflight  int
		quiet     time.Duration // since a request last ended (or one went out)
		queued    int
		slow      bool
		bound     int
		deferred  bool
		drain     time.Duration
		tierIndex int
	}{
		{"a fast endpoint holds its backlog, however long", 20 * time.Millisecond, 64, 10 * time.Millisecond, 5000, false, 0, false, 0, 0},
		{"a fast endpoint's hiccup is not slowness", 20 * time.Millisecond, 64, 200 * time.Millisecond, 5000, false, 0, false, 0, 0},
		{"a fast endpoint quiet for 4 s holds what it works in 10 s at that pace", 20 * time.Millisecond, 64, 4 * time.Second, 5000, true, 160, true, 128 * time.Second, 1},
		{"an endpoint answering in a second holds 80", time.Second, 8, 100 * time.Millisecond, 81, true, 80, true, 32 * time.Second, 0},
		{"an endpoint answering in a second holding 80 defers nothing", time.Second, 8, 100 * time.Millisecond, 80, true, 80, false, 32 * time.Second, 0},
		{"an endpoint timing out holds one task per request", 10 * time.Second, 8, time.Second, 300, true, 8, true, 320 * time.Second, 2},
		{"an endpoint never heard from, quiet for half a second, holds 20", 0, 1, 500 * time.Millisecond, 300, true, 20, true, 320 * time.Second, 2},
		{"an endpoint never heard from, just sent to, is not slow", 0, 1, 10 * time.Millisecond, 300, false, 0, false, 0, 0},
		{"an idle slow endpoint is slow by its answer time", 2 * time.Second, 0, time.Hour, 50, true, 40, true, 64 * time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &endpoint{latency: tc.latency, heard: tc.latency > 0, inflight: tc.inflight, busy: now.Add(-time.Hour), lastEnd: now.Add(-tc.quiet),
				queue: make([]job, tc.queued)}
			if got := e.slow(now); got != tc.slow {
				t.Fatalf("slow %v, want %v (pace %v)", got, tc.slow, e.pace(now))
			}
			if got := e.backlogged(8, now); got != tc.deferred {
				t.Errorf("backlogged %v, want %v (bound %d)", got, tc.deferred, e.bound(8, now))
			}
			if !tc.slow {
				return
			}
			if got := e.bound(8, now); got != tc.bound {
				t.Errorf("bound %d, want %d", got, tc.bound)
			}
			drain := e.drain(8, 10*time.Second, now)
			if drain < tc.drain || drain > tc.drain+tc.drain/100 {
				t.Errorf("drain %v, want %v", drain, tc.drain)
			}
			delays := []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour}
			if got := DeferTier(delays, drain); got != tc.tierIndex {
				t.Errorf("deferred to tier %d, want %d", got, tc.tierIndex)
			}
		})
	}
}
