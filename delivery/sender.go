package delivery

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-retry"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fasthttp"
)

// SenderGroup is the consumer group of the senders. Every sender instance
// reads the first-attempt topic and all retry tiers; Kafka spreads the
// partitions over the instances.
const SenderGroup = "delivery.sender"

// SlowAnswer, SlowDrain and MaxQueuedPerEndpoint bound what a slow
// endpoint may hold in memory: one that takes SlowAnswer or more per
// request (or has gone that long without an answer) holds the tasks it
// works within SlowDrain at that pace, and the rest are deferred to the
// first retry tier whose wait covers MaxQueuedPerEndpoint of them. A fast
// endpoint's backlog is simply worked, even when this process is so busy
// that its requests take tens of milliseconds.
const (
	MaxQueuedPerEndpoint = 256
	SlowAnswer           = 250 * time.Millisecond
	SlowDrain            = 10 * time.Second
)

// FastAnswer and FastFactor: an endpoint whose attempts take less than
// FastAnswer on average may have FastFactor times PerEndpoint requests in
// flight.
const (
	FastAnswer = 50 * time.Millisecond
	FastFactor = 8
)

// MaxAttempts is how many attempts a delivery run has.
const MaxAttempts = 7

// UserAgent identifies our delivery requests.
const UserAgent = "podsvc-webhooks/1.0"

// Sender makes delivery attempts. Records are taken from the partitions in
// order but worked concurrently, at most PerEndpoint at a time for one
// webhook (FastFactor times that for one that answers within FastAnswer),
// so a slow or failing endpoint holds only its own tasks. A retry
// tier partition whose head is not yet due is paused until it is (the poll
// loop never sleeps). Offsets are committed up to the first record not
// finished; a record worked again after a crash is recognised by its done
// marker, or at worst attempted a second time with the same event id.
type Sender struct {
	Hooks    *Hooks
	Producer *kgo.Client
	Brokers  []string
	HTTP     *fasthttp.Client
	// Guard, when set, holds each stored URL to the URL rules again before
	// its request (the address rules apply when HTTP dials): a URL stored
	// under rules since tightened, or outside production, is refused.
	Guard       *Guard
	Streaks     *Streaks
	Marks       *DoneMarks
	Disable     func(ctx context.Context, webhookID, account uuid.UUID, gen int) error
	Delays      []time.Duration // waits before attempts 2..7
	Timeout     time.Duration   // per attempt
	Log         *slog.Logger
	Metrics     *Metrics
	Concurrency int              // requests in flight in all; default 256
	PerEndpoint int              // requests in flight per webhook; default 8
	MaxBuffered int              // records held in memory; default 10000
	ClientOpts  func() []kgo.Opt // extra options per consumer session (metrics hooks)
	Naming      schemas.Naming   // topic names and the group id's prefix
	// DeadLetters counts the tasks moved to pod.dlq.delivery.sender, in
	// the stages' pod_consumer_dead_letters_total (optional).
	DeadLetters *stream.Metrics
}

// Topics are the topics a sender consumes: first attempts and every tier.
func (s *Sender) Topics() []string {
	return append([]string{s.Naming.Topic(schemas.TopicWebhookDeliveries)}, s.Naming.RetryTiers()...)
}

// Run consumes until ctx ends, starting a new session after failures.
func (s *Sender) Run(ctx context.Context) {
	s.DeadLetters.CountDeadLetters(SenderGroup)
	if s.Concurrency <= 0 {
		s.Concurrency = 256
	}
	if s.PerEndpoint <= 0 {
		s.PerEndpoint = 8
	}
	if s.MaxBuffered <= 0 {
		s.MaxBuffered = 10000
	}
	for ctx.Err() == nil {
		if err := s.session(ctx); err != nil && ctx.Err() == nil {
			s.Log.Error("delivery sender session ended; restarting", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// errMoved ends an attempt not made because its record's partition moved
// to another member before the request went out.
var errMoved = errors.New("the record's partition moved to another member before the request")

// attempt makes one attempt of t and records its outcome: the result event
// and, after a failure, the task of the next attempt (or the DLQ). It
// returns an error only when the outcome could not be recorded before ctx
// ended.
//
// sending, when not nil, is called right before the request goes out,
// and says whether it may: false (the record's partition has moved to
// another member meanwhile) ends the attempt unmade and unrecorded, with
// errMoved, for the partition's new owner to make; sent, when not nil,
// once the request is over (with its duration) or known not to be made
// (with 0), before the outcome is recorded; recorded, when not nil, once
// the outcome is on the log.
func (s *Sender) attempt(ctx context.Context, j job, sending func() bool, sent func(time.Duration), recorded func()) error {
	if sent == nil {
		sent = func(time.Duration) {}
	}
	if sending == nil {
		sending = func() bool { return true }
	}
	t := j.task
	claimed, again := s.Marks.Claim(context.WithoutCancel(ctx), j.tp.topic, j.tp.partition, j.offset, t)
	if !claimed {
		return nil // done before, or another record carrying the task is worked
	}
	var hook *Hook
	if err := retry.Do(ctx, retry.NewConstant(time.Second), func(ctx context.Context) error {
		h, err := s.Hooks.Get(ctx, t.WebhookID)
		if err != nil {
			s.Log.Warn("loading webhook failed; retrying", "webhook", t.WebhookID, "err", err)
			return retry.RetryableError(err)
		}
		hook = h
		return nil
	}); err != nil {
		return err
	}
	if hook == nil {
		return nil // deleted: its log goes with it
	}
	active := hook.IsActive && hook.Gen == t.Gen
	var answer Attempted
	switch {
	case active && hook.Unsigned:
		s.Log.Error("webhook secret cannot be opened with the configured keys (POD_WEBHOOK_SECRET_KEY); attempt not made",
			"webhook", t.WebhookID, "delivery", t.DeliveryID, "attempt", t.Attempt)
		answer = Attempted{Unsent: true, Failure: FailureUnsigned, At: time.Now()}
		sent(0)
	case active:
		if !sending() {
			sent(0)
			return errMoved
		}
		start := time.Now()
		func() {
			s.Metrics.addInFlight(1)
			defer s.Metrics.addInFlight(-1) // a panic in send included
			answer.Code, answer.Failure = s.send(hook, t)
		}()
		took := time.Since(start)
		answer.At = time.Now()
		sent(took)
		s.Metrics.observeAttempt(took)
	}
	v := Outcome(t, active, answer, time.Now(), s.Delays)
	res := v.Result
	var recs []*kgo.Record
	switch {
	case v.Next != nil:
		rec, err := TaskRecord(s.Naming.RetryTier(v.NextTier), *v.Next)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
	case v.DeadLetter:
		rec, err := TaskRecord(s.Naming.Topic(schemas.TopicWebhookDLQ), t)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
	}
	var reset redis.Cmder
	streak := 0
	switch v.Streak {
	case StreakReset:
		// Issued now on the marks' pipelined client, read after the marks:
		// it shares their round trips and is not held behind the record.
		reset = s.Streaks.ResetWith(context.WithoutCancel(ctx), s.Marks.Redis, t.WebhookID, t.Gen)
		s.Metrics.observeDelivered(res.At.Sub(t.CreatedAt))
	case StreakFailed:
		// Counted after shutdown began too, as the outcome is recorded.
		streak = s.Streaks.Fail(context.WithoutCancel(ctx), t.WebhookID, t.Gen, t.DeliveryID, t.Run)
	}
	class := ClassNone
	if active {
		class = statusClass(answer.Code, answer.Failure)
	}
	s.Metrics.outcome(v.Metric, class)
	value, err := codec.Marshal(res)
	if err != nil {
		return err
	}
	recs = append(recs, &kgo.Record{Topic: s.Naming.Topic(schemas.TopicWebhookAttempts), Key: []byte(t.WebhookID.String()), Value: value,
		Headers: []kgo.RecordHeader{{Key: "status", Value: []byte(res.Status)}}})
	if err := s.record(ctx, recs...); err != nil {
		return err
	}
	if recorded != nil {
		recorded()
	}
	rctx := context.WithoutCancel(ctx)
	_ = s.Marks.Done(rctx, t, again)
	if reset != nil && reset.Err() != nil {
		s.Log.Warn("failure streak not reset (Redis unavailable)", "webhook", t.WebhookID, "err", reset.Err())
	}
	if streak >= FailureLimit && s.Disable != nil {
		// Sent after the outcome is on the log, so the delivery log meets
		// the failure before the disable. Every failure at or past the
		// limit sends it: the command's id derives from the webhook and
		// generation, so the decider decides it once, and a sender that
		// stopped before sending it leaves it to the next failure. The one
		// failure that reached the limit logs and counts it, sent now or by
		// a later failure.
		if err := s.Disable(rctx, t.WebhookID, t.AccountID, t.Gen); err != nil {
			s.Log.Warn("auto-disable command not sent; the next failed delivery sends it", "webhook", t.WebhookID, "err", err)
		}
		if streak == FailureLimit {
			s.Log.Info("webhook auto-disabled after consecutive failed deliveries", "webhook", t.WebhookID)
			s.Metrics.autoDisabled()
		}
	}
	return nil
}

// record puts an attempt's outcome on the log, retrying until it is there.
// After shutdown began it keeps trying for a while (the attempt was made),
// then gives up: the task is left to be worked again.
func (s *Sender) record(ctx context.Context, recs ...*kgo.Record) error {
	backoff := retry.WithCappedDuration(5*time.Second, retry.NewExponential(100*time.Millisecond))
	var giveUp time.Time
	return retry.Do(context.WithoutCancel(ctx), backoff, func(pctx context.Context) error {
		pctx, cancel := context.WithTimeout(pctx, 10*time.Second)
		defer cancel()
		err := s.Producer.ProduceSync(pctx, recs...).FirstErr()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			if giveUp.IsZero() {
				giveUp = time.Now().Add(15 * time.Second)
			} else if time.Now().After(giveUp) {
				return err
			}
		}
		s.Log.Warn("recording a delivery outcome failed; retrying", "err", err)
		return retry.RetryableError(err)
	})
}

// deadLetter puts r on the sender's dead-letter topic with cause, as a
// stage's dead letter is made (stream.DeadLetterRecord), and counts it.
func (s *Sender) deadLetter(ctx context.Context, r *kgo.Record, cause error) error {
	if err := s.record(ctx, stream.DeadLetterRecord(s.Naming, SenderGroup, r, cause, time.Now())); err != nil {
		return err
	}
	s.DeadLetters.DeadLettered(SenderGroup)
	return nil
}

func ptr[T any](v T) *T { return &v }
