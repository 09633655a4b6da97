package stream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestIsPermanent(t *testing.T) {
	pgErr := func(code string) error { return fmt.Errorf("insert: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("broker gone"), false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("handle: %w", Poison(errors.New("not JSON"))), true},
		{&panicError{"boom"}, true},
		{pgErr("22P05"), true}, // untranslatable character (a NUL in jsonb)
		{pgErr("22021"), true}, // invalid byte sequence (a NUL in text)
		{pgErr("23505"), true}, // unique violation
		{pgErr("23503"), true}, // foreign key violation
		{pgErr("54000"), true}, // program limit exceeded
		{fmt.Errorf("commit: %w", &pgconn.PgError{Code: "54000", Routine: "PreCommit_Notify"}), false}, // the NOTIFY queue is full
		{pgErr("21000"), true},  // one key upserted twice in a statement
		{pgErr("08006"), false}, // connection failure
		{pgErr("40001"), false}, // serialization failure
		{pgErr("40P01"), false}, // deadlock
		{pgErr("53300"), false}, // too many connections
		{pgErr("57P01"), false}, // admin shutdown
		{pgErr("25P02"), false}, // in failed transaction
		{errRejoin, false},
		{fmt.Errorf("produce: %w", kerr.MessageTooLarge), true},
		{fmt.Errorf("produce: %w", kerr.NotEnoughReplicas), false},
	} {
		if got := IsPermanent(tc.err); got != tc.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestRetryingGivesUpOnABatch counts the tries the retry policy gives a
// batch that fails permanently before it hands it to the dead-letter
// policy to narrow down: one when the failure comes of the records'
// content, PoisonAttempts when a retry might clear it.
func TestRetryingGivesUpOnABatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		tries int
	}{
		{"a record marked poison is tried once", Poison(errors.New("not JSON")), 1},
		{"a NUL Postgres refuses is tried once", &pgconn.PgError{Code: "22021"}, 1},
		{"a key upserted twice in one statement is tried once", &pgconn.PgError{Code: "21000"}, 1},
		{"a unique violation is tried PoisonAttempts times", &pgconn.PgError{Code: "23505"}, PoisonAttempts},
		{"a handler's panic is tried PoisonAttempts times", &panicError{"boom"}, PoisonAttempts},
		{"a row too big for an index is tried PoisonAttempts times", &pgconn.PgError{Code: "54000"}, PoisonAttempts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tries := 0
			step := retrying(slog.New(slog.DiscardHandler))(func(context.Context, []*kgo.Record) ([]*kgo.Record, error) {
				tries++
				return nil, tc.err
			})
			_, err := step(context.Background(), []*kgo.Record{{Value: []byte("x")}})
			var poisoned *poisonedBatch
			if !errors.As(err, &poisoned) {
				t.Fatalf("the batch ended with %v, want it handed on as poisoned", err)
			}
			if tries != tc.tries {
				t.Errorf("tried %d times, want %d", tries, tc.tries)
			}
		})
	}
}

// startDL runs c with a dead-letter producer and metrics; the dead-letter
// topic c writes is created first.
func (f fixture) startDL(t *testing.T, c Consumer, m *Metrics) running {
	t.Helper()
	if err := kafka.EnsureTopics(context.Background(), f.prod, kafka.TopicSpec{Partitions: schemas.DeadLetterPartitions}, schemas.Naming{}.DeadLetterTopic(c.deadLetters())); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	runner := &Runner{Pool: f.pool, Brokers: f.brokers, Log: slog.New(slog.DiscardHandler), Producer: f.prod, Metrics: m}
	c.OffsetCheck = 200 * time.Millisecond
	go func() { defer close(done); _ = runner.Run(ctx, c) }()
	return running{cancel, done}
}

func (f fixture) produceValues(t *testing.T, values ...string) {
	t.Helper()
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(v), Value: []byte(v),
			Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("test")}}})
	}
	if err := f.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// deadLetters reads the whole dead-letter topic of consumer.
func (f fixture) deadLetters(t *testing.T, consumer string) []*kgo.Record {
	t.Helper()
	return f.readAll(t, schemas.Naming{}.DeadLetterTopic(consumer))
}

// readAll reads every record topic holds now.
func (f fixture) readAll(t *testing.T, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := f.endOffset(topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for int64(len(out)) < ends {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s", len(out), ends, topic)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func (f fixture) endOffset(topic string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		return 0, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

// A poison record that is the first the log holds after records retention
// deleted (a new group, or offsets cleared by a replay, behind a log start
// of 500) is dead-lettered and passed, as apply passes the gap. It once
// made the consumer rejoin, seek to 0 and be reset to the same record, for
// good, stopping the partition for every tenant.
func TestAPoisonRecordFirstAfterARetentionGapIsDeadLettered(t *testing.T) {
	f := setup(t)
	c := Consumer{Name: "test.gap.poison", Handle: func(context.Context, pgx.Tx, []*kgo.Record) ([]*kgo.Record, error) {
		return nil, Poison(errors.New("cannot decode"))
	}}
	if err := kafka.EnsureTopics(context.Background(), f.prod, kafka.TopicSpec{Partitions: schemas.DeadLetterPartitions}, schemas.Naming{}.DeadLetterTopic(c.deadLetters())); err != nil {
		t.Fatal(err)
	}
	runner := &Runner{Pool: f.pool, Brokers: f.brokers, Log: slog.New(slog.DiscardHandler), Producer: f.prod, Metrics: NewMetrics(prometheus.NewRegistry())}
	logs := bounded(500, 1<<40)
	step := runner.policies(c, runner.Log, logs)
	bad := &kgo.Record{Topic: topic, Partition: 0, Offset: 500, Value: []byte("bad")}
	if _, err := step(context.Background(), []*kgo.Record{bad}); err != nil {
		t.Fatalf("the poison record after the gap: %v", err)
	}
	if n := len(f.deadLetters(t, c.Name)); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
	var next int64
	if err := f.pool.QueryRow(context.Background(), `SELECT next_offset FROM consumer_offsets WHERE consumer = $1 AND partition = 0`, c.Name).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if next != 501 {
		t.Errorf("stored offset %d, want 501 (past the dead letter)", next)
	}
}

// TestPoisonRecordIsDeadLettered mixes three records no retry can apply (a
// handler-marked one, one Postgres refuses for its NUL byte, one that makes
// the handler panic) into a stream of good ones: every good record, before
// and after them, is applied exactly once, and the three land in the
// dead-letter topic with the error and their origin in headers.
func TestPoisonRecordIsDeadLettered(t *testing.T) {
	f := setup(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	var poisonTries atomic.Int32
	c := Consumer{Name: "test.poison", Topics: []string{topic}, MaxBatch: 40, Handle: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
		for _, r := range recs {
			switch string(r.Value) {
			case "poison":
				poisonTries.Add(1)
				return nil, Poison(errors.New("cannot decode poison"))
			case "panic":
				panic("handler bug on this record")
			}
		}
		return insertHandler(ctx, tx, recs) // "nul\x00" fails with SQLSTATE 22021
	}}
	f.produce(t, 0, 100)
	f.produceValues(t, "poison", "nul\x00", "panic")
	f.produce(t, 100, 200)
	r := f.startDL(t, c, m)
	defer func() { r.stop() }()
	f.waitCount(t, 200)

	var dls []*kgo.Record
	testenv.Eventually(t, 10*time.Second, func() error {
		dls = f.deadLetters(t, c.Name)
		if len(dls) != 3 {
			return fmt.Errorf("%d dead letters, want 3", len(dls))
		}
		return nil
	})
	errs := map[string]string{}
	for _, dl := range dls {
		if Header(dl, HeaderDLQConsumer) != c.Name || Header(dl, HeaderDLQTopic) != topic || Header(dl, HeaderDLQOffset) == "" ||
			Header(dl, HeaderDLQPartition) == "" || Header(dl, "origin") != "test" || string(dl.Key) != string(dl.Value) {
			t.Errorf("dead letter %q has headers %v", dl.Value, dl.Headers)
		}
		if _, err := time.Parse(time.RFC3339Nano, Header(dl, HeaderDLQTime)); err != nil {
			t.Errorf("dead letter time: %v", err)
		}
		errs[string(dl.Value)] = Header(dl, HeaderDLQError)
	}
	for v, want := range map[string]string{"poison": "cannot decode poison", "nul\x00": "22021", "panic": "panicked"} {
		if !strings.Contains(errs[v], want) {
			t.Errorf("dead letter %q: error %q, want it to mention %q", v, errs[v], want)
		}
	}
	if n := testutil.ToFloat64(m.deadLetters.WithLabelValues(c.Name)); n != 3 {
		t.Errorf("dead letter counter %v, want 3", n)
	}
	if n := poisonTries.Load(); n < 2 {
		t.Errorf("the poison record was tried %d times: it must be tried in its batch and on its own", n)
	}
	var sum int64
	if err := f.pool.QueryRow(context.Background(), `SELECT sum(next_offset) FROM consumer_offsets WHERE consumer = $1`, c.Name).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != 203 {
		t.Errorf("stored offsets sum to %d, want 203 (past the dead letters)", sum)
	}

	// A restart neither applies nor dead-letters anything again.
	r.stop()
	f.produce(t, 200, 210)
	r = f.startDL(t, c, m)
	f.waitCount(t, 210)
	if n := len(f.deadLetters(t, c.Name)); n != 3 {
		t.Errorf("%d dead letters after a restart, want 3", n)
	}
}

// poisonedBy is insertHandler for a batch without a record of value, and
// poison (cannot be decoded) for one with it.
func poisonedBy(value string) Handler {
	return func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
		for _, r := range recs {
			if string(r.Value) == value {
				return nil, Poison(errors.New("cannot decode " + value))
			}
		}
		return insertHandler(ctx, tx, recs)
	}
}

// TestADeadLetterGoesWhereDeadLetterAsSays runs a consumer that
// dead-letters as another one (a read model's rebuild, as its projector):
// its dead letters are that one's, in that one's topic.
func TestADeadLetterGoesWhereDeadLetterAsSays(t *testing.T) {
	f := setup(t)
	c := Consumer{Name: "test.rebuild", DeadLetterAs: "test.live", Topics: []string{topic},
		Handle: poisonedBy("poison")}
	f.produce(t, 0, 10)
	f.produceValues(t, "poison")
	f.produce(t, 10, 20)
	r := f.startDL(t, c, nil)
	defer r.stop()
	f.waitCount(t, 20)
	testenv.Eventually(t, 10*time.Second, func() error {
		dls := f.deadLetters(t, "test.live")
		if len(dls) != 1 {
			return fmt.Errorf("%d dead letters in test.live's topic, want 1", len(dls))
		}
		if string(dls[0].Value) != "poison" || Header(dls[0], HeaderDLQConsumer) != "test.live" {
			return fmt.Errorf("dead letter %q of consumer %q", dls[0].Value, Header(dls[0], HeaderDLQConsumer))
		}
		return nil
	})
}

// TestADeadLetterWrittenAfterTheFirstReadIsFound: the check a rebuild
// makes before it dead-letters a record finds a dead letter the live
// projector wrote after the check first read the topic.
func TestADeadLetterWrittenAfterTheFirstReadIsFound(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	n := schemas.Naming{}
	if err := kafka.EnsureTopics(ctx, f.prod, kafka.TopicSpec{Partitions: schemas.DeadLetterPartitions}, n.DeadLetterTopic("test.live")); err != nil {
		t.Fatal(err)
	}
	dead, err := DeadLetteredBy(ctx, f.brokers, kadm.NewClient(f.prod), n, "test.live", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	at := Place{topic, 1, 7}
	if dead(at) {
		t.Fatal("a place no dead letter names was found")
	}
	dl := DeadLetterRecord(n, "test.live", &kgo.Record{Topic: at.Topic, Partition: at.Partition, Offset: at.Offset, Value: []byte("poison")},
		errors.New("cannot decode"), time.Now())
	if err := f.prod.ProduceSync(ctx, dl).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if !dead(at) {
		t.Fatal("the dead letter written after the first read was not found")
	}
	if dead(Place{topic, 1, 8}) {
		t.Fatal("the next place was found too")
	}
}

// A record whose dead letter is more than the dead-letter topic takes
// (its own headers added, or a topic with a lower limit) is dead-lettered
// without its value and headers (and its key, a long one here), saying
// how many bytes were left out, and the consumer goes on. Its dead-lettering was retried without end,
// holding up its partition for every tenant.
func TestADeadLetterTooLargeForItsTopicKeepsItsPlace(t *testing.T) {
	f := setup(t)
	c := Consumer{Name: "test.too-large", Topics: []string{topic},
		Handle: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
			for _, r := range recs {
				if strings.HasPrefix(string(r.Value), "poison") {
					return nil, Poison(errors.New("cannot decode poison"))
				}
			}
			return insertHandler(ctx, tx, recs)
		}}
	r := f.startDL(t, c, nil)
	defer r.stop()
	dlTopic := schemas.Naming{}.DeadLetterTopic(c.Name)
	altered, err := kadm.NewClient(f.prod).AlterTopicConfigs(context.Background(),
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("2000")}}, dlTopic)
	if err == nil {
		_, err = altered.On(dlTopic, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 3000)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	poison := "poison" + hex.EncodeToString(big) // produceValues makes it the key too
	f.produce(t, 0, 10)
	f.produceValues(t, poison)
	f.produce(t, 10, 20)
	f.waitCount(t, 20)
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := len(f.deadLetters(t, c.Name)); n != 1 {
			return fmt.Errorf("%d dead letters, want 1", n)
		}
		return nil
	})
	dl := f.deadLetters(t, c.Name)[0]
	if len(dl.Key)+len(dl.Value) != 0 || Header(dl, "origin") != "" {
		t.Errorf("the dead letter kept %d bytes of key and value, and headers %v", len(dl.Key)+len(dl.Value), dl.Headers)
	}
	if got, want := Header(dl, HeaderDLQDropped), fmt.Sprint(2*len(poison)+len("origin")+len("test")); got != want {
		t.Errorf("%s is %q, want %q", HeaderDLQDropped, got, want)
	}
	if Header(dl, HeaderDLQTopic) != topic || Header(dl, HeaderDLQOffset) == "" ||
		!strings.Contains(Header(dl, HeaderDLQError), "cannot decode poison") {
		t.Errorf("the dead letter does not say where the record is and why: headers %v", dl.Headers)
	}
}

// TestTransientFailureIsNotDeadLettered fails one record with errors that
// are not permanent (a lost connection, a plain error) many more times than
// PoisonAttempts: it is retried until the failure clears, then applied; the
// dead-letter topic stays empty.
func TestTransientFailureIsNotDeadLettered(t *testing.T) {
	f := setup(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	var fails atomic.Int32
	c := Consumer{Name: "test.transient", Topics: []string{topic}, Handle: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
		for _, r := range recs {
			if string(r.Value) == "v00010" {
				switch n := fails.Add(1); {
				case n <= 4:
					return nil, fmt.Errorf("write: %w", &pgconn.PgError{Code: "08006", Message: "connection failure"})
				case n <= 8:
					return nil, errors.New("transient")
				}
			}
		}
		return insertHandler(ctx, tx, recs)
	}}
	f.produce(t, 0, 30)
	r := f.startDL(t, c, m)
	defer r.stop()
	f.waitCount(t, 30)
	if n := fails.Load(); n < 9 {
		t.Fatalf("handler saw the failing record %d times", n)
	}
	if n := len(f.deadLetters(t, c.Name)); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
	if n := testutil.ToFloat64(m.deadLetters.WithLabelValues(c.Name)); n != 0 {
		t.Errorf("dead letter counter %v, want 0", n)
	}
	if n := testutil.ToFloat64(m.batchFailures.WithLabelValues(c.Name)); n != 8 {
		t.Errorf("batch failures %v, want 8", n)
	}
}

// TestProgressMetric: the progress timestamp and the dead-letter counter
// exist from the start; an idle consumer keeps its progress fresh, one
// stuck on a batch does not.
func TestProgressMetric(t *testing.T) {
	f := setup(t)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	var stuck atomic.Bool
	c := Consumer{Name: "test.progress", Topics: []string{topic}, Handle: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
		if stuck.Load() {
			return nil, errors.New("database unavailable")
		}
		return insertHandler(ctx, tx, recs)
	}}
	started := time.Now()
	r := f.startDL(t, c, m)
	defer r.stop()
	progress := func() time.Time {
		return time.Unix(0, int64(testutil.ToFloat64(m.lastProgress.WithLabelValues(c.Name))*1e9))
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := testutil.CollectAndCount(m.deadLetters); n != 1 {
			return fmt.Errorf("%d dead letter series", n)
		}
		if p := progress(); p.Before(started.Add(-time.Second)) {
			return fmt.Errorf("progress %v before start %v", p, started)
		}
		return nil
	})
	// Idle: progress moves on with the empty polls.
	first := progress()
	testenv.Eventually(t, 10*time.Second, func() error {
		if !progress().After(first) {
			return errors.New("idle consumer made no progress")
		}
		return nil
	})
	// Stuck on a batch: progress stops while the batch is retried.
	stuck.Store(true)
	f.produce(t, 0, 5)
	testenv.Eventually(t, 10*time.Second, func() error {
		if testutil.ToFloat64(m.batchFailures.WithLabelValues(c.Name)) < 3 {
			return errors.New("batch not failing yet")
		}
		return nil
	})
	frozen := progress()
	testenv.Eventually(t, 10*time.Second, func() error {
		if testutil.ToFloat64(m.batchFailures.WithLabelValues(c.Name)) < 6 {
			return errors.New("not retried enough yet")
		}
		return nil
	})
	if p := progress(); !p.Equal(frozen) {
		t.Fatalf("a consumer retrying a failing batch made progress: %v -> %v", frozen, p)
	}
	stuck.Store(false)
	f.waitCount(t, 5)
	if !progress().After(frozen) {
		t.Fatal("no progress after the batch applied")
	}
	if n := len(f.deadLetters(t, c.Name)); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}

// TestWhatADeadLetterRecordsCommitsWithIt: Consumer.OnDeadLetter writes in
// the transaction that moves the consumer past the record it
// dead-letters, so its rows are there exactly when the offset moved. A
// hook that fails for good is rolled back to its savepoint: the record is
// still dead-lettered and passed, and the rest of the batch applied. One
// that fails for a while is tried again before anything is produced.
func TestWhatADeadLetterRecordsCommitsWithIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fails  func(try int) bool
		hook   string // the hook's statement when it does not fail
		marked bool   // its row is there
	}{
		{"a hook's row commits with the move past the dead letter", func(int) bool { return false },
			`INSERT INTO applied (value) VALUES ('hook:' || $1)`, true},
		{"a hook that fails for good leaves the dead letter as it is", func(int) bool { return false },
			`INSERT INTO applied (value) VALUES (NULL || $1)`, false},
		{"a hook that fails for a while is tried again", func(try int) bool { return try < 3 },
			`INSERT INTO applied (value) VALUES ('hook:' || $1)`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			ctx := context.Background()
			tries := 0
			c := Consumer{Name: "test.hook", Handle: poisonedBy("bad"), OnDeadLetter: func(ctx context.Context, tx pgx.Tx, rec *kgo.Record, _ error) error {
				if tries++; tc.fails(tries) {
					return errors.New("connection reset")
				}
				_, err := tx.Exec(ctx, tc.hook, string(rec.Value))
				return err
			}}
			if err := kafka.EnsureTopics(ctx, f.prod, kafka.TopicSpec{Partitions: schemas.DeadLetterPartitions}, schemas.Naming{}.DeadLetterTopic(c.Name)); err != nil {
				t.Fatal(err)
			}
			runner := &Runner{Pool: f.pool, Brokers: f.brokers, Log: slog.New(slog.DiscardHandler), Producer: f.prod}
			logs := bounded(0, 1<<40)
			recs := []*kgo.Record{{Topic: topic, Offset: 0, Value: []byte("good-1")}, {Topic: topic, Offset: 1, Value: []byte("bad")},
				{Topic: topic, Offset: 2, Value: []byte("good-2")}}
			if _, err := runner.policies(c, runner.Log, logs)(ctx, recs); err != nil {
				t.Fatal(err)
			}
			var good, marked int
			var next int64
			if err := f.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE value LIKE 'good-%'), count(*) FILTER (WHERE value = 'hook:bad'),
				(SELECT next_offset FROM consumer_offsets WHERE consumer = $1 AND partition = 0) FROM applied`, c.Name).Scan(&good, &marked, &next); err != nil {
				t.Fatal(err)
			}
			if good != 2 || (marked == 1) != tc.marked || next != 3 || len(f.deadLetters(t, c.Name)) != 1 {
				t.Fatalf("%d good records applied, hook row %d, stored offset %d, %d dead letters; want 2, %v, 3, 1",
					good, marked, next, len(f.deadLetters(t, c.Name)), tc.marked)
			}
		})
	}
}
