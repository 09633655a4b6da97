package delivery

import (
	"time"

	"github.com/printpod/pod/schemas"
)

// Verdict is what a delivery attempt comes to, decided from the task, the
// webhook as it is now and the request's answer, with no side effect: the
// sender records Result, moves Next to its retry tier or the task to the
// dead-letter topic, and keeps the endpoint's failure streak and the
// metrics as Verdict says.
type Verdict struct {
	Result schemas.AttemptResult
	// Next is the task's next attempt, due after its wait; NextTier is the
	// index of the retry tier it waits in. Nil unless the attempt failed
	// with attempts left.
	Next     *schemas.DeliveryTask
	NextTier int
	// DeadLetter: the last attempt failed; the task goes to the DLQ.
	DeadLetter bool
	// Streak says what the attempt does to the endpoint's failure streak.
	Streak StreakChange
	// Metric is the outcome label: success, retry, failed or cancelled.
	Metric string
}

// StreakChange is an attempt's effect on its endpoint's failure streak.
type StreakChange int

const (
	StreakKept   StreakChange = iota // no request made
	StreakReset                      // a 2xx: the endpoint works
	StreakFailed                     // a failed delivery run (its last attempt failed)
)

// Attempted is the answer of one request: the HTTP status (0 when none
// came) and, unless it was a 2xx, a short description of the failure.
type Attempted struct {
	Code    int
	Failure string
	At      time.Time // when the answer came
	// Unsent: the service could not make the request (Hook.Unsigned). It
	// fails the attempt, but says nothing of the endpoint: the failure
	// streak is kept.
	Unsent bool
}

// FailureUnsigned is the failure of an attempt whose request could not be
// signed.
const FailureUnsigned = "signing_secret_unavailable"

// Outcome decides an attempt. active says whether the webhook is active at
// the task's generation; when it is not, no request is made (sent is
// ignored) and the delivery is cancelled. delays are the waits before
// attempts 2..MaxAttempts.
func Outcome(t schemas.DeliveryTask, active bool, sent Attempted, now time.Time, delays []time.Duration) Verdict {
	res := schemas.AttemptResult{DeliveryID: t.DeliveryID, WebhookID: t.WebhookID, AccountID: t.AccountID, EventID: t.EventID,
		Topic: t.Topic, Gen: t.Gen, Run: t.Run, Attempt: t.Attempt, At: now.UTC(), CreatedAt: t.CreatedAt}
	if !active {
		res.Status, res.Error = schemas.DeliveryCancelled, ptr("webhook_disabled")
		return Verdict{Result: res, Metric: "cancelled"}
	}
	res.Attempted = !sent.Unsent
	res.At = sent.At.UTC()
	if sent.Code > 0 {
		res.StatusCode = ptr(sent.Code)
	}
	if sent.Unsent && sent.Failure == "" {
		sent.Failure = FailureUnsigned
	}
	if sent.Failure == "" {
		res.Status = schemas.DeliverySuccess
		return Verdict{Result: res, Streak: StreakReset, Metric: "success"}
	}
	if t.Attempt >= MaxAttempts || t.Attempt-1 >= len(delays) {
		streak := StreakFailed
		if sent.Unsent {
			streak = StreakKept // not the endpoint's failure
		}
		res.Status, res.Error = schemas.DeliveryFailed, ptr(sent.Failure)
		return Verdict{Result: res, DeadLetter: true, Streak: streak, Metric: "failed"}
	}
	next := t
	next.Attempt++
	next.DueAt = res.At.Add(delays[t.Attempt-1])
	res.Status, res.Error, res.NextRetryAt = schemas.DeliveryPending, ptr(sent.Failure), &next.DueAt
	return Verdict{Result: res, Next: &next, NextTier: t.Attempt - 1, Metric: "retry"}
}
