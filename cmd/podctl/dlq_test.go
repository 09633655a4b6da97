package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

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
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, dlq, commands))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i, key := range []string{"a", "b"} {
		rec := &kgo.Record{Topic: commands, Key: []byte(key), Value: []byte(`{}`), Offset: int64(i)}
		if err := prod.ProduceSync(ctx, stream.DeadLetterRecord(n, consumer, rec, errors.New("bad"), time.Now())).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO dlq_replay_positions (dlq_topic, next_offset) VALUES ($1, 5)`, dlq); err != nil {
		t.Fatal(err)
	}
	d := &dlqEnv{naming: n, brokers: cluster.ListenAddrs(), pool: pool, prod: prod, adm: kadm.NewClient(prod)}
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
	var listed []DeadLetter
	for line := range strings.Lines(out.String()) {
		var l DeadLetter
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		listed = append(listed, l)
	}
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
