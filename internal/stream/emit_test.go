package stream

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

const outTopic = "test.out"

// TestEmittedRecordsAreProducedBeforeTheBatchCommits: what a handler
// returns reaches its topic before the batch's transaction commits. The
// first batch's commit fails (a deferred constraint, checked at commit, so
// after the produce): the batch is redone and emits the same records a
// second time, byte for byte, and every input still applies once.
func TestEmittedRecordsAreProducedBeforeTheBatchCommits(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if err := kafka.EnsureTopics(ctx, f.prod, kafka.TopicSpec{Partitions: 2}, outTopic); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, `CREATE TABLE gate (k int, CONSTRAINT gate_once UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	c := Consumer{Name: "test.emit", Topics: []string{topic}, MaxBatch: 100, Handle: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
		if _, err := insertHandler(ctx, tx, recs); err != nil {
			return nil, err
		}
		if calls.Add(1) == 1 {
			// Breaks the deferred constraint: only the commit fails.
			if _, err := tx.Exec(ctx, `INSERT INTO gate VALUES (1), (1)`); err != nil {
				return nil, err
			}
		}
		out := make([]*kgo.Record, len(recs))
		for i, r := range recs {
			out[i] = &kgo.Record{Topic: outTopic, Key: r.Key, Value: append([]byte("out-"), r.Value...),
				Headers: []kgo.RecordHeader{{Key: "cause", Value: r.Value}}}
		}
		return out, nil
	}}
	f.produce(t, 0, 40)
	r := f.startDL(t, c, nil)
	defer r.stop()
	f.waitCount(t, 40)

	var out []*kgo.Record
	testenv.Eventually(t, 10*time.Second, func() error {
		out = f.readAll(t, outTopic)
		if len(out) < 41 {
			return fmt.Errorf("%d records emitted, want the 40 and the failed batch's again", len(out))
		}
		return nil
	})
	seen := map[string]*kgo.Record{}
	repeats := 0
	for _, rec := range out {
		cause := string(rec.Headers[0].Value)
		first, ok := seen[cause]
		if !ok {
			seen[cause] = rec
			continue
		}
		repeats++
		if !bytes.Equal(first.Key, rec.Key) || !bytes.Equal(first.Value, rec.Value) {
			t.Errorf("the redone batch emitted %q/%q for %s, first %q/%q", rec.Key, rec.Value, cause, first.Key, first.Value)
		}
	}
	if len(seen) != 40 {
		t.Errorf("%d inputs have an emitted record, want 40", len(seen))
	}
	if repeats == 0 || repeats != len(out)-40 {
		t.Errorf("%d repeats in %d records: the failed commit's batch should be emitted again whole", repeats, len(out))
	}
	if calls.Load() < 2 {
		t.Errorf("handler ran %d times", calls.Load())
	}
}

// TestARecordTooLargeToEmitLeavesNothingOfItsBatchOnTheLog: a handler that
// emits, for one input, a small record and one larger than the producer
// takes. Nothing that input causes reaches the log (produced one by one,
// the small record would stand for a transaction that rolled back); the
// input is dead-lettered, and every other input's record is emitted.
func TestARecordTooLargeToEmitLeavesNothingOfItsBatchOnTheLog(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if err := kafka.EnsureTopics(ctx, f.prod, kafka.TopicSpec{Partitions: 2}, outTopic); err != nil {
		t.Fatal(err)
	}
	limit, _ := f.prod.OptValue(kgo.ProducerBatchMaxBytes).(int32)
	c := Consumer{Name: "test.emit-large", Topics: []string{topic}, MaxBatch: 100, Handle: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
		if _, err := insertHandler(ctx, tx, recs); err != nil {
			return nil, err
		}
		var out []*kgo.Record
		for _, r := range recs {
			out = append(out, &kgo.Record{Topic: outTopic, Key: r.Key, Value: append([]byte("out-"), r.Value...)})
			if string(r.Value) == "large" {
				out = append(out, &kgo.Record{Topic: outTopic, Key: r.Key, Value: make([]byte, limit)})
			}
		}
		return out, nil
	}}
	f.produce(t, 0, 20)
	f.produceValues(t, "large")
	f.produce(t, 20, 40)
	r := f.startDL(t, c, nil)
	defer r.stop()
	f.waitCount(t, 40)
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := len(f.deadLetters(t, c.Name)); n != 1 {
			return fmt.Errorf("%d dead letters, want the large one's input", n)
		}
		return nil
	})
	emitted := map[string]int{}
	for _, rec := range f.readAll(t, outTopic) {
		emitted[string(rec.Value)]++
	}
	if n := emitted["out-large"]; n != 0 {
		t.Errorf("the dead-lettered input's small record was emitted %d times", n)
	}
	if len(emitted) != 40 {
		t.Errorf("%d inputs have an emitted record, want the 40 others", len(emitted))
	}
}
