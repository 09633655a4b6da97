package delivery

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAnAttemptThatPanicsIsDeadLettered makes an attempt panic (the sender
// has no webhook store to read, as a bug would leave it): the task goes to
// the sender's dead-letter topic with the panic as its error, is counted,
// and the attempt ends as finished instead of taking the process down.
func TestAnAttemptThatPanicsIsDeadLettered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := schemas.Naming{}
	dlq := n.DeadLetterTopic(SenderGroup)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, dlq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	opt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	reg := prometheus.NewRegistry()
	s := &Sender{Producer: producer, Naming: n, Log: slog.New(slog.DiscardHandler), DeadLetters: stream.NewMetrics(reg),
		Marks: &DoneMarks{Redis: rdb, Prefix: "podtest:" + testenv.RandomSuffix() + ":"}}
	task := schemas.DeliveryTask{DeliveryID: uuid.New(), WebhookID: uuid.New(), AccountID: uuid.New(), EventID: uuid.New(),
		Topic: "order.created", Gen: 1, Run: 1, Attempt: 1, Payload: []byte(`{"id":1}`)}
	value, err := codec.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Topic: n.Topic(schemas.TopicWebhookDeliveries), Partition: 3, Offset: 41, Key: []byte(task.WebhookID.String()), Value: value}
	ss := &session{s: s, ctx: ctx}

	err = ss.attemptRecovering(job{tp: tp{rec.Topic, rec.Partition}, offset: rec.Offset, task: task, rec: rec}, nil)
	if err != nil {
		t.Fatalf("the panicking attempt ended with %v, want finished", err)
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(dlq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(consumer.Close)
	fetches := consumer.PollRecords(ctx, 1)
	if err := fetches.Err(); err != nil {
		t.Fatal(err)
	}
	got := fetches.Records()
	if len(got) != 1 || string(got[0].Value) != string(value) {
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
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pod_consumer_dead_letters_total Records moved to the consumer's dead-letter topic because they can never be applied, by consumer.
# TYPE pod_consumer_dead_letters_total counter
pod_consumer_dead_letters_total{consumer="delivery.sender"} 1
`), "pod_consumer_dead_letters_total"); err != nil {
		t.Error(err)
	}
}
