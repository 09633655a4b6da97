package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/delivery"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// newDLQEnv is podctl's dead-letter environment on an in-process broker
// holding topics (one partition each) and a database of its own.
func newDLQEnv(t *testing.T, topics ...string) *dlqEnv {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &dlqEnv{naming: schemas.Naming{}, brokers: cluster.ListenAddrs(), pool: pgtest.NewPool(t), prod: prod, adm: kadm.NewClient(prod)}
}

// jsonLines reads what podctl printed, one JSON value of T a line.
func jsonLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var vs []T
	for line := range strings.Lines(out) {
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("podctl printed %q: %v", line, err)
		}
		vs = append(vs, v)
	}
	return vs
}

// deadLetter writes rec's dead letter, as consumer would.
func (d *dlqEnv) deadLetter(t *testing.T, consumer string, rec *kgo.Record) {
	t.Helper()
	if err := d.prod.ProduceSync(context.Background(), stream.DeadLetterRecord(d.naming, consumer, rec, errors.New("bad"), time.Now())).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestADeadLetterTopicMadeAgainIsReplayedFromItsStart: a replay position
// past the end of its dead-letter topic names the dead letters of a topic
// since made again (a cluster lost or moved, Postgres kept). The new
// topic's dead letters are listed as not replayed, and a replay re-drives
// them all, rather than passing them as replayed for good.
func TestADeadLetterTopicMadeAgainIsReplayedFromItsStart(t *testing.T) {
	ctx := context.Background()
	const consumer = "order-decider"
	n := schemas.Naming{}
	dlq, commands := n.DeadLetterTopic(consumer), n.Topic(schemas.TopicOrderCommands)
	d := newDLQEnv(t, dlq, commands)
	for i, key := range []string{"a", "b"} {
		d.deadLetter(t, consumer, &kgo.Record{Topic: commands, Key: []byte(key), Value: []byte(`{}`), Offset: int64(i)})
	}
	pool := d.pool
	if _, err := pool.Exec(ctx, `INSERT INTO dlq_replay_positions (dlq_topic, next_offset) VALUES ($1, 5)`, dlq); err != nil {
		t.Fatal(err)
	}
	stored := func() int64 {
		t.Helper()
		var next int64
		if err := pool.QueryRow(ctx, `SELECT next_offset FROM dlq_replay_positions WHERE dlq_topic = $1`, dlq).Scan(&next); err != nil {
			t.Fatal(err)
		}
		return next
	}

	var out, errw bytes.Buffer
	if err := d.list(ctx, consumer, &out, &errw); err != nil {
		t.Fatal(err)
	}
	listed := jsonLines[DeadLetter](t, out.String())
	if len(listed) != 2 || listed[0].Replayed || listed[1].Replayed {
		t.Fatalf("dlq list printed %+v, want two dead letters not replayed", listed)
	}
	if !strings.Contains(errw.String(), "made again") || stored() != 5 {
		t.Fatalf("dlq list said %q and left the position at %d; want it told, and left at 5", errw.String(), stored())
	}

	out.Reset()
	errw.Reset()
	if err := d.replay(ctx, consumer, -1, &out, &errw); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "\n"); got != 2 || stored() != 2 {
		t.Fatalf("dlq replay re-drove %d dead letters (%q; %q), position %d; want 2, then 2", got, out.String(), errw.String(), stored())
	}
}

// TestAFanoutDeadLetterThatWouldStickAnOrderWaitsForTheRebuild: the order
// projector reads the fan-out's topic too. An order's created event that
// both dead-lettered, put back while the read model lacks the order and
// the decider has it further on, would show the order at version 1 for
// good: the replay stops there, saying to rebuild the read model first,
// and goes on once the read model has the order.
func TestAFanoutDeadLetterThatWouldStickAnOrderWaitsForTheRebuild(t *testing.T) {
	ctx := context.Background()
	n := schemas.Naming{}
	events := n.Topic(schemas.TopicOrderEvents)
	d := newDLQEnv(t, n.DeadLetterTopic(delivery.FanoutName), events)
	order := uuid.New()
	d.deadLetter(t, delivery.FanoutName, &kgo.Record{Topic: events, Key: []byte(order.String()), Value: []byte(`{}`),
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderOrderVersion, Value: []byte("1")}}})
	if _, err := d.pool.Exec(ctx, `INSERT INTO order_state (order_id, account_id, state, version) VALUES ($1, $2, '{}', 3)`, order, uuid.New()); err != nil {
		t.Fatal(err)
	}
	replayed := func() (int64, error) {
		t.Helper()
		var out, errw bytes.Buffer
		err := d.replay(ctx, delivery.FanoutName, -1, &out, &errw)
		ends, lerr := d.adm.ListEndOffsets(ctx, events)
		if lerr != nil {
			t.Fatal(lerr)
		}
		end, _ := ends.Lookup(events, 0)
		return end.Offset, err
	}
	if got, err := replayed(); got != 0 || err == nil || !strings.Contains(err.Error(), "podctl replay --projection orders") {
		t.Fatalf("%d records put back while the read model lacks the order (%v); want none, and the rebuild named", got, err)
	}
	// The rebuild gives the read model the order.
	if _, err := d.pool.Exec(ctx, `INSERT INTO orders (order_id, account_id, store_id, reference_id, status, duplicate, pricing, created_via,
		shipping_service, line_items, idempotency_key, queued_at, created_at, updated_at, version)
		VALUES ($1, $2, $2, 'r', 'SUCCESS', false, '{}', 'api', 'eco', '[]', $2, now(), now(), now(), 3)`, order, uuid.New()); err != nil {
		t.Fatal(err)
	}
	if got, err := replayed(); got != 1 || err != nil {
		t.Fatalf("%d records put back once the read model has the order (%v); want 1", got, err)
	}
}

// TestARefusedCreateIsNotPutBack: the order decider refuses a create as
// it dead-letters it, and its client is told the order was not created;
// a replay passes that dead letter (put back, it would make the order
// once the refusal is pruned) and puts back its other commands.
func TestARefusedCreateIsNotPutBack(t *testing.T) {
	ctx := context.Background()
	n := schemas.Naming{}
	commands := n.Topic(schemas.TopicOrderCommands)
	d := newDLQEnv(t, n.DeadLetterTopic(order.DeciderName), commands)
	for _, kind := range []string{order.KindCreate, order.KindCancel} {
		d.deadLetter(t, order.DeciderName, &kgo.Record{Topic: commands, Key: []byte(uuid.NewString()),
			Value: []byte(`{"id":"` + uuid.NewString() + `","kind":"` + kind + `","order_id":"` + uuid.NewString() + `"}`)})
	}
	var out, errw bytes.Buffer
	if err := d.replay(ctx, order.DeciderName, -1, &out, &errw); err != nil {
		t.Fatal(err)
	}
	lines := jsonLines[Replayed](t, out.String())
	ends, err := d.adm.ListEndOffsets(ctx, commands)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(commands, 0)
	if len(lines) != 2 || !strings.Contains(lines[0].Skipped, "refused") || lines[1].Skipped != "" || end.Offset != 1 {
		t.Fatalf("replay printed %+v and put back %d records; want the create passed and the cancel put back", lines, end.Offset)
	}
}
