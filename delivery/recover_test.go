package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/secretbox"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAnAttemptThatPanicsIsDeadLettered makes an attempt panic (the sender
// has no webhook store to read, as a bug would leave it): the task goes to
// the sender's dead-letter topic with the panic as its error, is counted,
// and the attempt ends as finished instead of taking the process down.
func TestAnAttemptThatPanicsIsDeadLettered(t *testing.T) {
	f := newSenderFixture(t)
	task, rec := f.task(t, 1)

	if err := f.session.attemptRecovering(job{tp: tp{rec.Topic, rec.Partition}, offset: rec.Offset, task: task, rec: rec}, nil, nil); err != nil {
		t.Fatalf("the panicking attempt ended with %v, want finished", err)
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(f.cluster.ListenAddrs()...), kgo.ConsumeTopics(f.dlq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(consumer.Close)
	fetches := consumer.PollRecords(f.ctx, 1)
	if err := fetches.Err(); err != nil {
		t.Fatal(err)
	}
	got := fetches.Records()
	if len(got) != 1 || string(got[0].Value) != string(rec.Value) {
		t.Fatalf("dead letters: %v", got)
	}
	headers := map[string]string{}
	for _, h := range got[0].Headers {
		headers[h.Key] = string(h.Value)
	}
	if !strings.Contains(headers[stream.HeaderDLQError], "the sender panicked") || headers[stream.HeaderDLQOffset] != "41" ||
		headers[stream.HeaderDLQConsumer] != SenderGroup {
		t.Errorf("dead letter headers: %v", headers)
	}
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(`
# HELP pod_consumer_dead_letters_total Records moved to the consumer's dead-letter topic because they can never be applied, by consumer.
# TYPE pod_consumer_dead_letters_total counter
pod_consumer_dead_letters_total{consumer="delivery.sender"} 1
`), "pod_consumer_dead_letters_total"); err != nil {
		t.Error(err)
	}
	// Found by review: the dead-lettered record kept its claim on the task
	// for 15 minutes, so the dead letter redriven within them (a copy at a
	// new offset) skipped the attempt that was never made.
	if claimed, _ := f.session.s.Marks.Claim(f.ctx, rec.Topic, rec.Partition, 97, task); !claimed {
		t.Error("the redriven task found the dead-lettered record's claim and would skip its attempt")
	}
}

// TestAPanicAfterTheOutcomeIsRecordedLeavesNoDeadLetter fails a delivery's
// last attempt with the webhook's streak at the limit, and makes the
// auto-disable's send, which comes after the outcome is on the log, panic:
// the outcome is recorded, and the task, done, is not dead-lettered (a
// dead letter redriven would deliver it again).
func TestAPanicAfterTheOutcomeIsRecordedLeavesNoDeadLetter(t *testing.T) {
	f := newSenderFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	t.Cleanup(srv.Close)
	task, rec := f.task(t, MaxAttempts)
	s := f.withHook(t, task, srv)
	for range FailureLimit {
		s.Streaks.Fail(f.ctx, task.WebhookID, task.Gen, uuid.New(), 1)
	}
	disables := 0
	s.Disable = func(context.Context, uuid.UUID, uuid.UUID, int) error {
		disables++
		panic("the disable's send broke")
	}

	if err := f.session.attemptRecovering(job{tp: tp{rec.Topic, rec.Partition}, offset: rec.Offset, task: task, rec: rec}, nil, nil); err != nil {
		t.Fatalf("the attempt ended with %v, want finished", err)
	}
	if disables != 1 {
		t.Fatalf("the disable was sent %d times, want 1 (the attempt did not get past its record)", disables)
	}
	ends, err := kadm.NewClient(f.producer).ListEndOffsets(f.ctx, f.dlq, s.Naming.Topic(schemas.TopicWebhookAttempts))
	if err != nil {
		t.Fatal(err)
	}
	count := func(topic string) (n int64) {
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic == topic {
				n += o.Offset
			}
		})
		return n
	}
	if n := count(s.Naming.Topic(schemas.TopicWebhookAttempts)); n != 1 {
		t.Errorf("%d attempt results on the log, want 1", n)
	}
	if n := count(f.dlq); n != 0 {
		t.Errorf("%d dead letters of a task whose outcome was recorded, want 0", n)
	}
}

// TestALastFailureFinishedAfterShutdownBeganCountsInTheStreak: a last
// attempt under way when the sender begins to stop is waited for and
// recorded; its failure must count toward the endpoint's auto-disable as
// well (found by review: it was counted with the session's ended context,
// which Redis refused, so the streak lost it for good).
func TestALastFailureFinishedAfterShutdownBeganCountsInTheStreak(t *testing.T) {
	f := newSenderFixture(t)
	ctx, stop := context.WithCancel(f.ctx)
	defer stop()
	f.session.ctx = ctx
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stop() // shutdown begins while the request is out
		w.WriteHeader(500)
	}))
	t.Cleanup(srv.Close)
	task, rec := f.task(t, MaxAttempts)
	s := f.withHook(t, task, srv)

	if err := f.session.attemptRecovering(job{tp: tp{rec.Topic, rec.Partition}, offset: rec.Offset, task: task, rec: rec}, nil, nil); err != nil {
		t.Fatalf("the attempt ended with %v, want recorded", err)
	}
	counts, err := s.Streaks.Counts(f.ctx, []uuid.UUID{task.WebhookID}, []int{task.Gen})
	if err != nil {
		t.Fatal(err)
	}
	if counts[0] != 1 {
		t.Fatalf("the webhook's failure streak is %d, want 1", counts[0])
	}
}

// TestAnAttemptWhosePartitionMovedSendsNothing: a task whose partition
// moved to another member while its attempt waited (found by review: the
// new owner, reading the record again, sent it too) is not sent, and
// nothing is recorded: the attempt ends unfinished, the new owner's.
func TestAnAttemptWhosePartitionMovedSendsNothing(t *testing.T) {
	f := newSenderFixture(t)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	t.Cleanup(srv.Close)
	task, rec := f.task(t, 1)
	s := f.withHook(t, task, srv)

	moved := func() bool { return false }
	err := f.session.attemptRecovering(job{tp: tp{rec.Topic, rec.Partition}, offset: rec.Offset, task: task, rec: rec}, moved, nil)
	if !errors.Is(err, errMoved) {
		t.Fatalf("the attempt ended with %v, want %v", err, errMoved)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests sent for a task whose partition moved, want none", n)
	}
	ends, err := kadm.NewClient(f.producer).ListEndOffsets(f.ctx, s.Naming.Topic(schemas.TopicWebhookAttempts))
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Errorf("%d attempt results on partition %d, want none", o.Offset, o.Partition)
		}
	})
}

type senderFixture struct {
	ctx      context.Context
	cluster  *kfake.Cluster
	producer *kgo.Client
	rdb      *redis.Client
	reg      *prometheus.Registry
	dlq      string
	session  *session
}

// newSenderFixture is a session of a sender with an in-process broker and
// real Redis, and nothing else: no webhook store, no HTTP client.
func newSenderFixture(t *testing.T) senderFixture {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	n := schemas.Naming{}
	f := senderFixture{ctx: ctx, dlq: n.DeadLetterTopic(SenderGroup), reg: prometheus.NewRegistry()}
	var err error
	f.cluster, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, f.dlq, n.Topic(schemas.TopicWebhookAttempts), n.Topic(schemas.TopicWebhookDLQ)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.cluster.Close)
	if f.producer, err = kgo.NewClient(kgo.SeedBrokers(f.cluster.ListenAddrs()...)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.producer.Close)
	f.rdb = testenv.NewRedis(t)
	s := &Sender{Producer: f.producer, Naming: n, Log: slog.New(slog.DiscardHandler), DeadLetters: stream.NewMetrics(f.reg),
		Marks: &DoneMarks{Redis: f.rdb, Prefix: "podtest:" + testenv.RandomSuffix() + ":"}}
	f.session = &session{s: s, ctx: ctx, running: map[taskKey]chan struct{}{}}
	return f
}

// withHook gives the fixture's sender task's webhook, active, at srv (the
// webhook store in a Postgres of its own, its HTTP client let reach srv),
// and the streaks; it returns the sender.
func (f senderFixture) withHook(t *testing.T, task schemas.DeliveryTask, srv *httptest.Server) *Sender {
	t.Helper()
	pool := pgtest.NewPool(t)
	box, err := secretbox.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := box.Seal(secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(f.ctx, `INSERT INTO webhooks (id, account_id, url, topics, is_active, gen, secret, created_at, updated_at)
		VALUES ($1, $2, $3, '{order.created}', true, 1, $4, now(), now())`, task.WebhookID, task.AccountID, srv.URL+"/h", sealed); err != nil {
		t.Fatal(err)
	}
	s := f.session.s
	s.Hooks = &Hooks{Pool: pool, Box: box}
	guard := &Guard{AllowTargets: []string{strings.TrimPrefix(srv.URL, "http://")}}
	s.HTTP, s.Timeout = guard.Client(2*time.Second, 8), 2*time.Second
	s.Streaks = &Streaks{Redis: f.rdb, Prefix: s.Marks.Prefix, Log: s.Log}
	return s
}

// task is a delivery task at attempt, and the record carrying it.
func (f senderFixture) task(t *testing.T, attempt int) (schemas.DeliveryTask, *kgo.Record) {
	task := schemas.DeliveryTask{DeliveryID: uuid.New(), WebhookID: uuid.New(), AccountID: uuid.New(), EventID: uuid.New(),
		Topic: "order.created", Gen: 1, Run: 1, Attempt: attempt, Payload: []byte(`{"id":1}`)}
	value, err := codec.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	return task, &kgo.Record{Topic: f.session.s.Naming.Topic(schemas.TopicWebhookDeliveries), Partition: 3, Offset: 41,
		Key: []byte(fmt.Sprint(task.WebhookID)), Value: value}
}
