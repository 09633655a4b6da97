package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

const topic = "test.stream"

// TestMain checks that no goroutine outlives the tests: every consumer, client
// and broker stops when told to.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	cluster *kfake.Cluster
	pool    *pgxpool.Pool
	brokers []string
	prod    *kgo.Client
}

func setup(t *testing.T) fixture {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	ctx := context.Background()
	url := testenv.NewDatabase(t)
	pool, err := pg.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE applied (value text PRIMARY KEY, n int NOT NULL DEFAULT 1)`); err != nil {
		t.Fatal(err)
	}
	prod, err := kafka.NewProducer(brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	if err := kafka.EnsureTopics(ctx, prod, kafka.TopicSpec{Partitions: 3}, topic); err != nil {
		t.Fatal(err)
	}
	return fixture{cluster: cluster, pool: pool, brokers: brokers, prod: prod}
}

// produce writes records from to to (values v<i>) and returns them with
// their partitions and offsets.
func (f fixture) produce(t *testing.T, from, to int) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i % 7)), Value: []byte(fmt.Sprintf("v%05d", i))})
	}
	if err := f.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return recs
}

// insertHandler records each value and counts how often it was applied;
// waitCount fails when any value was applied more than once.
func insertHandler(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
	for _, r := range recs {
		if _, err := tx.Exec(ctx, `INSERT INTO applied (value) VALUES ($1)
			ON CONFLICT (value) DO UPDATE SET n = applied.n + 1`, string(r.Value)); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func (f fixture) count(t *testing.T) int {
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM applied`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f fixture) waitCount(t *testing.T, want int) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := f.count(t); n != want {
			return fmt.Errorf("%d applied, want %d", n, want)
		}
		return nil
	})
	var twice int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM applied WHERE n > 1`).Scan(&twice); err != nil {
		t.Fatal(err)
	}
	if twice != 0 {
		t.Fatalf("%d records were applied more than once", twice)
	}
}

type running struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (r running) stop() { r.cancel(); <-r.done }

func (f fixture) start(c Consumer) running {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	runner := &Runner{Pool: f.pool, Brokers: f.brokers, Log: slog.New(slog.DiscardHandler)}
	c.OffsetCheck = 200 * time.Millisecond
	go func() { defer close(done); _ = runner.Run(ctx, c) }()
	return running{cancel, done}
}

func TestAppliesEveryRecordOnceAcrossRestarts(t *testing.T) {
	f := setup(t)
	c := Consumer{Name: "test.once", Topics: []string{topic}, Handle: insertHandler, MaxBatch: 37}
	f.produce(t, 0, 300)
	r := f.start(c)
	f.waitCount(t, 300)
	r.stop()

	f.produce(t, 300, 500)
	r = f.start(c)
	f.waitCount(t, 500)
	r.stop()

	var sum int64
	if err := f.pool.QueryRow(context.Background(), `SELECT sum(next_offset) FROM consumer_offsets WHERE consumer = 'test.once'`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != 500 {
		t.Fatalf("stored offsets sum to %d, want 500", sum)
	}
}

func TestTwoInstancesShareWithoutDuplicates(t *testing.T) {
	f := setup(t)
	c := Consumer{Name: "test.shared", Topics: []string{topic}, Handle: insertHandler, MaxBatch: 10}
	a := f.start(c)
	b := f.start(c)
	f.produce(t, 0, 400)
	f.waitCount(t, 400)
	a.stop() // b takes over a's partitions from the stored offsets
	f.produce(t, 400, 600)
	f.waitCount(t, 600)
	b.stop()
}

func TestFailingHandlerIsRetriedNotSkipped(t *testing.T) {
	f := setup(t)
	var failures atomic.Int32
	c := Consumer{Name: "test.retry", Topics: []string{topic}, Handle: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
		if failures.Add(1) <= 3 {
			return nil, errors.New("transient")
		}
		return insertHandler(ctx, tx, recs)
	}}
	f.produce(t, 0, 50)
	r := f.start(c)
	defer r.stop()
	f.waitCount(t, 50)
	if failures.Load() < 4 {
		t.Fatalf("handler ran %d times", failures.Load())
	}
}

func TestPanickingHandlerIsRecovered(t *testing.T) {
	f := setup(t)
	var once sync.Once
	c := Consumer{Name: "test.panic", Topics: []string{topic}, Handle: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
		once.Do(func() { panic("boom") })
		return insertHandler(ctx, tx, recs)
	}}
	f.produce(t, 0, 20)
	r := f.start(c)
	defer r.stop()
	f.waitCount(t, 20)
}

// TestAlreadyAppliedRecordsAreDropped replays a batch as a zombie instance
// would after losing its partitions: nothing is applied twice.
func TestAlreadyAppliedRecordsAreDropped(t *testing.T) {
	f := setup(t)
	runner := &Runner{Pool: f.pool, Brokers: f.brokers, Log: slog.New(slog.DiscardHandler)}
	c := Consumer{Name: "test.zombie", Handle: insertHandler}
	recs := []*kgo.Record{
		{Topic: topic, Partition: 0, Offset: 0, Value: []byte("a")},
		{Topic: topic, Partition: 0, Offset: 1, Value: []byte("b")},
		{Topic: topic, Partition: 1, Offset: 0, Value: []byte("c")},
	}
	ctx := context.Background()
	logs := bounded(0, 1<<40)
	applied, err := runner.apply(ctx, c, logs, recs)
	if err != nil || len(applied) != 3 {
		t.Fatalf("first apply: %v, %d applied", err, len(applied))
	}
	again := append(recs, &kgo.Record{Topic: topic, Partition: 0, Offset: 2, Value: []byte("d")})
	applied, err = runner.apply(ctx, c, logs, again)
	if err != nil || len(applied) != 1 || string(applied[0].Value) != "d" {
		t.Fatalf("second apply: %v, applied %v", err, applied)
	}
	if n := f.count(t); n != 4 {
		t.Fatalf("%d rows, want 4", n)
	}
	// A batch that starts after the stored offset means the stored offset was
	// rewound: the consumer must re-read, not skip.
	gap := []*kgo.Record{{Topic: topic, Partition: 1, Offset: 5, Value: []byte("e")}}
	if _, err := runner.apply(ctx, c, logs, gap); !errors.Is(err, errRejoin) {
		t.Fatalf("gap: %v, want errRejoin", err)
	}
	// ... unless retention removed the records in between: then it goes on.
	gone := bounded(5, 1<<40)
	if applied, err := runner.apply(ctx, c, gone, gap); err != nil || len(applied) != 1 {
		t.Fatalf("gap before the log start: %v, applied %d", err, len(applied))
	}
	// A partition with no offset row yet counts as stored offset 0.
	fresh := []*kgo.Record{{Topic: topic, Partition: 2, Offset: 3, Value: []byte("f")}}
	if _, err := runner.apply(ctx, c, logs, fresh); !errors.Is(err, errRejoin) {
		t.Fatalf("first batch starting past 0: %v, want errRejoin", err)
	}
	// Found by review: a replay clears the offsets of a log retention has
	// truncated (it starts at 2) while a member fetches at 3. The record
	// at 2 is still there: the member re-reads, rather than rebuilding the
	// read model from where it happened to be.
	truncated := bounded(2, 1<<40)
	if _, err := runner.apply(ctx, c, truncated, fresh); !errors.Is(err, errRejoin) {
		t.Fatalf("a batch past the start of a truncated log, offsets cleared: %v, want errRejoin", err)
	}
	// The re-read is reset to the log's start, where it goes on.
	fromStart := []*kgo.Record{{Topic: topic, Partition: 2, Offset: 2, Value: []byte("g")}, fresh[0]}
	if applied, err := runner.apply(ctx, c, truncated, fromStart); err != nil || len(applied) != 2 {
		t.Fatalf("the re-read from the truncated log's start: %v, applied %d", err, len(applied))
	}
	// Records below the stored offset of a log that now ends before it
	// (partition 0 is stored at 3, its log ends at 1) are a new log's,
	// not records applied before: nothing is applied, the stored offset
	// goes back to the log's start, and the consumer re-reads.
	lost := bounded(0, 1)
	remade := []*kgo.Record{{Topic: topic, Partition: 0, Offset: 0, Value: []byte("h")}}
	if applied, err := runner.apply(ctx, c, lost, remade); !errors.Is(err, errRejoin) || len(applied) != 0 {
		t.Fatalf("a record of a log ending before the stored offset: %v, applied %d, want errRejoin", err, len(applied))
	}
	var stored int64
	if err := f.pool.QueryRow(ctx, `SELECT next_offset FROM consumer_offsets WHERE consumer = $1 AND topic = $2 AND partition = 0`,
		c.Name, topic).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("the stored offset is %d (%v), want the log's start, 0", stored, err)
	}
	if applied, err := runner.apply(ctx, c, lost, remade); err != nil || len(applied) != 1 {
		t.Fatalf("the re-read of the new log: %v, applied %d", err, len(applied))
	}
}

// bounded is what a session knows of logs that start at start and end at
// end, of topics whose ids its fetches did not carry.
func bounded(start, end int64) *logsRead {
	return &logsRead{
		bounds: func(context.Context, string, int32) (int64, int64, error) { return start, end, nil },
		current: func(context.Context, string) (uuid.UUID, error) {
			return uuid.Nil, errors.New("no topic id to ask for")
		},
		ids: map[string]uuid.UUID{},
	}
}

// TestAStoredOffsetIsTheLogOfItsTopicID: the stored offsets keep the id
// of the topic they were stored for. Records of a topic made again under
// the same name (another id) are the new log's, even where it grew past
// the offset stored for the old one: the stored offset goes to the new
// log's start, with the new id. A member whose client still reads the old
// topic (a zombie) moves nothing, applying or dead-lettering. A log cut
// back under the same id is read again from its start, where it was cut
// not being known.
func TestAStoredOffsetIsTheLogOfItsTopicID(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	runner := &Runner{Pool: f.pool, Brokers: f.brokers, Log: slog.New(slog.DiscardHandler), Producer: f.prod}
	c := Consumer{Name: "test.topic_ids", Handle: insertHandler}
	first, second := uuid.New(), uuid.New()
	now := first // the topic's id as the brokers give it
	// reading is what a session whose fetches carry id knows, of a log
	// from start to end.
	reading := func(id uuid.UUID, start, end int64) *logsRead {
		l := bounded(start, end)
		l.ids[topic] = id
		l.current = func(context.Context, string) (uuid.UUID, error) { return now, nil }
		return l
	}
	// recs are the records from to to of the log of topic id.
	recs := func(id uuid.UUID, from, to int64) []*kgo.Record {
		var out []*kgo.Record
		for off := from; off < to; off++ {
			out = append(out, &kgo.Record{Topic: topic, Partition: 0, Offset: off, Value: []byte(fmt.Sprintf("%s-%d", id, off))})
		}
		return out
	}
	stored := func(want int64, wantID uuid.UUID, what string) {
		t.Helper()
		var next int64
		var id pgtype.UUID
		if err := f.pool.QueryRow(ctx, `SELECT next_offset, topic_id FROM consumer_offsets WHERE consumer = $1 AND topic = $2 AND partition = 0`,
			c.Name, topic).Scan(&next, &id); err != nil {
			t.Fatal(err)
		}
		if next != want || uuid.UUID(id.Bytes) != wantID {
			t.Fatalf("%s: stored %d for topic %s, want %d for %s", what, next, uuid.UUID(id.Bytes), want, wantID)
		}
	}
	if applied, err := runner.apply(ctx, c, reading(first, 0, 1<<40), recs(first, 0, 5)); err != nil || len(applied) != 5 {
		t.Fatalf("the first batch: %v, applied %d", err, len(applied))
	}
	stored(5, first, "the first batch")

	// The topic made again; its new log grew past 5 and is fetched from there.
	now = second
	if applied, err := runner.apply(ctx, c, reading(second, 0, 8), recs(second, 5, 8)); !errors.Is(err, errRejoin) || len(applied) != 0 {
		t.Fatalf("records of a topic made again: %v, applied %d; want errRejoin and none", err, len(applied))
	}
	stored(0, second, "records of the topic made again")
	if applied, err := runner.apply(ctx, c, reading(second, 0, 8), recs(second, 0, 8)); err != nil || len(applied) != 8 {
		t.Fatalf("the new log read from its start: %v, applied %d, want all 8", err, len(applied))
	}

	// A zombie still reading the old topic moves nothing.
	old := recs(first, 8, 10)
	if applied, err := runner.apply(ctx, c, reading(first, 0, 1<<40), old); !errors.Is(err, errRejoin) || len(applied) != 0 {
		t.Fatalf("a zombie's records of the old topic: %v, applied %d; want errRejoin and none", err, len(applied))
	}
	if done, err := runner.deadLetter(ctx, c, reading(first, 0, 1<<40), old[0], errors.New("poison")); !errors.Is(err, errRejoin) || done {
		t.Fatalf("a zombie's dead letter of the old topic: %v, dead-lettered %v; want errRejoin and none", err, done)
	}
	stored(8, second, "a zombie's batch and dead letter")
	var records, applies int
	if err := f.pool.QueryRow(ctx, `SELECT count(*), sum(n) FROM applied`).Scan(&records, &applies); err != nil {
		t.Fatal(err)
	}
	if records != 5+8 || applies != records {
		t.Fatalf("%d records applied %d times, want each of the %d records of the two logs once", records, applies, 5+8)
	}

	// The same topic cut back to 6 records.
	if applied, err := runner.apply(ctx, c, reading(second, 0, 6), recs(second, 0, 6)); !errors.Is(err, errRejoin) || len(applied) != 0 {
		t.Fatalf("records of a log cut back: %v, applied %d; want errRejoin and none", err, len(applied))
	}
	stored(0, second, "a log cut back")
}

// TestConcurrentAppliesOfOneBatchApplyOnce runs the same never-seen batch
// through two appliers at once, as a zombie and the new owner would.
func TestConcurrentAppliesOfOneBatchApplyOnce(t *testing.T) {
	f := setup(t)
	runner := &Runner{Pool: f.pool, Brokers: f.brokers, Log: slog.New(slog.DiscardHandler)}
	c := Consumer{Name: "test.race", Handle: insertHandler}
	logs := bounded(0, 1<<40)
	for round := 0; round < 20; round++ {
		recs := []*kgo.Record{
			{Topic: topic, Partition: 0, Offset: int64(2 * round), Value: []byte(fmt.Sprintf("r%d-a", round))},
			{Topic: topic, Partition: 0, Offset: int64(2*round + 1), Value: []byte(fmt.Sprintf("r%d-b", round))},
		}
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = runner.apply(context.Background(), c, logs, recs)
			}()
		}
		wg.Wait()
	}
	f.waitCount(t, 40)
}

// TestReplayRewindsARunningConsumer rewinds the stored offsets (as podctl
// replay does) while the consumer runs idle: it starts over from the log.
func TestReplayRewindsARunningConsumer(t *testing.T) {
	f := setup(t)
	c := Consumer{Name: "test.replay", Topics: []string{topic}, Handle: insertHandler}
	f.produce(t, 0, 120)
	r := f.start(c)
	defer r.stop()
	f.waitCount(t, 120)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `TRUNCATE applied`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE consumer_offsets SET next_offset = 0 WHERE consumer = 'test.replay'`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f.waitCount(t, 120)
	f.produce(t, 120, 130)
	f.waitCount(t, 130)

	// A second replay, this time by deleting the offset rows, while records
	// keep arriving.
	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `TRUNCATE applied`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM consumer_offsets WHERE consumer = 'test.replay'`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f.produce(t, 130, 200)
	f.waitCount(t, 200)
}

// TestReplayRewindsABusyConsumer rewinds while records keep arriving, so the
// rewind is found by a batch, not by the idle check.
func TestReplayRewindsABusyConsumer(t *testing.T) {
	f := setup(t)
	c := Consumer{Name: "test.busy", Topics: []string{topic}, Handle: insertHandler, MaxBatch: 5}
	c.OffsetCheck = time.Hour
	f.produce(t, 0, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	runner := &Runner{Pool: f.pool, Brokers: f.brokers, Log: slog.New(slog.DiscardHandler)}
	go func() { defer close(done); _ = runner.Run(ctx, c) }()
	defer func() { cancel(); <-done }()
	f.waitCount(t, 100)
	err := pgx.BeginFunc(context.Background(), f.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), `TRUNCATE applied`); err != nil {
			return err
		}
		_, err := tx.Exec(context.Background(), `UPDATE consumer_offsets SET next_offset = 0 WHERE consumer = 'test.busy'`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f.produce(t, 100, 160)
	f.waitCount(t, 160)
}

// TestALingeringStageAppliesRecordsArrivingWithinItsLingerAsOneBatch: a
// record produced once the stage has fetched another is applied with it
// when the stage lingers, and alone when it does not or when its batch is
// already as large as its linger gathers.
func TestALingeringStageAppliesRecordsArrivingWithinItsLingerAsOneBatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		linger   time.Duration
		batch    int
		together bool
	}{
		{"lingering three seconds", 3 * time.Second, 0, true},
		{"lingering three seconds until the batch holds one record", 3 * time.Second, 1, false},
		{"not lingering", -1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			var mu sync.Mutex
			batchOf := map[string]int{} // value -> the batch it was applied in
			batches := 0
			fetched := fetchedHook{value: "v00001", seen: make(chan struct{})}
			c := Consumer{Name: "test.linger", Topics: []string{topic}, Linger: tc.linger, LingerBatch: tc.batch,
				SessionOpts: func() []kgo.Opt { return []kgo.Opt{kgo.WithHooks(&fetched)} },
				Handle: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
					mu.Lock()
					batches++
					for _, r := range recs {
						batchOf[string(r.Value)] = batches
					}
					mu.Unlock()
					return insertHandler(ctx, tx, recs)
				}}
			r := f.start(c)
			defer r.stop()
			f.produce(t, 0, 1) // the stage is running once this is applied
			f.waitCount(t, 1)
			f.produce(t, 1, 2)
			select { // the stage holds the first record before the second exists
			case <-fetched.seen:
			case <-time.After(30 * time.Second):
				t.Fatal("the stage never fetched the first record")
			}
			f.produce(t, 2, 3)
			f.waitCount(t, 3)
			mu.Lock()
			defer mu.Unlock()
			if got := batchOf["v00001"] == batchOf["v00002"]; got != tc.together {
				t.Fatalf("a record produced after the first was fetched applied with it: %v, want %v (batches %v)", got, tc.together, batchOf)
			}
		})
	}
}

// fetchedHook closes seen when the client has fetched the record whose
// value is value.
type fetchedHook struct {
	value string
	seen  chan struct{}
	once  sync.Once
}

func (h *fetchedHook) OnFetchRecordBuffered(r *kgo.Record) {
	if string(r.Value) == h.value {
		h.once.Do(func() { close(h.seen) })
	}
}

// TestTheHandlerPlansWithTheConnectionsOwnSetting: the offsets claim plans
// its statement once per connection (plan_cache_mode set for it alone);
// the handler that runs after it in the same transaction plans as the
// connection was configured to.
func TestTheHandlerPlansWithTheConnectionsOwnSetting(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	var own string
	if err := f.pool.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&own); err != nil {
		t.Fatal(err)
	}
	var seen []string
	c := Consumer{Name: "test.plans", Handle: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
		var mode string
		err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode)
		seen = append(seen, mode)
		return nil, err
	}}
	runner := &Runner{Pool: f.pool, Brokers: f.brokers, Log: slog.New(slog.DiscardHandler)}
	logs := bounded(0, 1<<40)
	for i := range 3 { // the first batch creates the offset rows and claims twice
		recs := []*kgo.Record{{Topic: topic, Partition: int32(i % 2), Offset: int64(i / 2), Value: []byte("a")}}
		if _, err := runner.apply(ctx, c, logs, recs); err != nil {
			t.Fatal(err)
		}
	}
	for i, mode := range seen {
		if mode != own {
			t.Errorf("batch %d: the handler planned with plan_cache_mode %s, the connection's is %s", i+1, mode, own)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("the handler ran %d times, want 3", len(seen))
	}
}

// TestAStoppedConsumerLeavesItsGroupsOffsetsAtWhatItApplied: the group's
// offsets in Kafka, which the lag metric reads, are committed when the
// consumer gives its partitions up, not only every second: stopped right
// after it applied a batch, the group shows no lag.
func TestAStoppedConsumerLeavesItsGroupsOffsetsAtWhatItApplied(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	c := Consumer{Name: "test.commits", Topics: []string{topic}, MaxBatch: 100, Handle: insertHandler}
	r := f.start(c)
	f.produce(t, 0, 10)
	f.waitCount(t, 10)
	f.produce(t, 10, 40)
	f.waitCount(t, 40)
	r.stop() // within a second of the last batch: before the periodic commit, most likely
	adm := kadm.NewClient(f.prod)
	committed, err := adm.FetchOffsets(ctx, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(end kadm.ListedOffset) {
		got, ok := committed.Lookup(end.Topic, end.Partition)
		if end.Offset > 0 && (!ok || got.At != end.Offset) {
			t.Errorf("partition %d: the group's offset is %d (committed %v), the log ends at %d", end.Partition, got.At, ok, end.Offset)
		}
	})
}

// TestARewindOfAQuietPartitionIsFoundWhileTheStageIsBusy: the stored
// offsets are compared with what was applied on time, not only when a poll
// comes back empty, so a partition rewound while it gets no records is
// read again though records keep coming on another.
func TestARewindOfAQuietPartitionIsFoundWhileTheStageIsBusy(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	c := Consumer{Name: "test.quiet", Topics: []string{topic}, Handle: insertHandler}
	first := f.produce(t, 0, 30)
	r := f.start(c)
	defer r.stop()
	f.waitCount(t, 30)

	busy := &kgo.Record{Topic: topic, Key: []byte("busy"), Value: []byte("b0")}
	if err := f.prod.ProduceSync(ctx, busy).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var quiet []string
	var partition int32 = -1
	for _, rec := range first {
		if rec.Partition != busy.Partition && (partition < 0 || rec.Partition == partition) {
			partition = rec.Partition
			quiet = append(quiet, string(rec.Value))
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			rec := &kgo.Record{Topic: topic, Key: []byte("busy"), Value: []byte(fmt.Sprintf("b%d", i))}
			if err := f.prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM applied WHERE value = ANY($1)`, quiet); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE consumer_offsets SET next_offset = 0 WHERE consumer = $1 AND partition = $2`, c.Name, partition)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		var n, twice int
		if err := f.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE n > 1) FROM applied WHERE value = ANY($1)`,
			quiet).Scan(&n, &twice); err != nil {
			return err
		}
		if twice > 0 {
			t.Fatalf("%d records of the rewound partition were applied twice", twice)
		}
		if n != len(quiet) {
			return fmt.Errorf("%d of the rewound partition's %d records applied again", n, len(quiet))
		}
		return nil
	})
}

// TestATopicMadeAgainIsAppliedFromItsStart: a topic deleted and created
// again (a cluster lost, a mistaken delete) begins a new log at offset 0,
// below the offsets stored for the old one. Its records are new and are
// applied, whether the consumer ran through the change or started after
// it, rather than dropped as applied before; so are those of a new log
// that grew past the old one's stored offsets before it was read (the
// offsets keep their topic's id).
func TestATopicMadeAgainIsAppliedFromItsStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		running bool
		written int // records written to the new topic: 140 is more than 60 in each partition
	}{
		{"a consumer running through it", true, 15},
		{"a consumer started after it", false, 15},
		{"a consumer started after the new log grew past its stored offsets", false, 140},
	} {
		running := tc.running
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			ctx := context.Background()
			c := Consumer{Name: "test.remade", Topics: []string{topic}, Handle: insertHandler}
			r := f.start(c)
			f.produce(t, 0, 60)
			f.waitCount(t, 60)
			if !running {
				r.stop()
			}
			deleted, err := kadm.NewClient(f.prod).DeleteTopics(ctx, topic)
			if err == nil {
				err = deleted.Error()
			}
			if err != nil {
				t.Fatal(err)
			}
			// A new client: the old one knows the old topic's id.
			prod, err := kafka.NewProducer(f.brokers)
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			f.prod = prod
			if err := kafka.EnsureTopics(ctx, f.prod, kafka.TopicSpec{Partitions: 3}, topic); err != nil {
				t.Fatal(err)
			}
			f.produce(t, 60, 60+tc.written)
			if !running {
				r = f.start(c)
			}
			defer r.stop()
			f.waitCount(t, 60+tc.written)
		})
	}
}

// TestALogCutBackIsReadOnFromTheCut: the stored offsets keep the leader
// epoch of the last record applied, and a consumer starting there asks
// the leader where that epoch ends. A log cut back since (an unclean
// leader election; here the broker's answer says every partition was cut
// to 3) holds new records from the cut on, however far it has grown: the
// stored offsets move to the cut and those records are applied.
func TestALogCutBackIsReadOnFromTheCut(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	c := Consumer{Name: "test.cut", Topics: []string{topic}, Handle: insertHandler}
	r := f.start(c)
	f.produce(t, 0, 60)
	f.waitCount(t, 60)
	r.stop()
	// What the cut makes new: every record from offset 3 of each partition.
	var again, unknown int
	if err := f.pool.QueryRow(ctx, `SELECT coalesce(sum(greatest(next_offset - 3, 0)), 0), count(*) FILTER (WHERE leader_epoch IS NULL)
		FROM consumer_offsets WHERE consumer = $1`, c.Name).Scan(&again, &unknown); err != nil {
		t.Fatal(err)
	}
	if again == 0 || unknown > 0 {
		t.Fatalf("%d records past offset 3, %d stored offsets with no leader epoch; want some, and none", again, unknown)
	}

	var cutting atomic.Bool
	cutting.Store(true)
	cut := testenv.CutBack(f.cluster, func(string, int32) int64 {
		if cutting.Load() {
			return 3
		}
		return -1
	})
	r = f.start(c)
	defer r.stop()
	testenv.Eventually(t, 30*time.Second, func() error {
		var n int
		if err := f.pool.QueryRow(ctx, `SELECT coalesce(sum(n - 1), 0) FROM applied`).Scan(&n); err != nil {
			return err
		}
		if n != again {
			return fmt.Errorf("%d records applied again from the cut, want %d", n, again)
		}
		return nil
	})
	cutting.Store(false)
	if cut.Load() == 0 {
		t.Fatal("the consumer never asked where its epoch ends")
	}
}

// TestAnEpochIsUsedOnlyAtTheOffsetItWasStoredFor: an offset moved by
// anything but the runner (an older release, a hand edit) leaves the
// epoch of another offset in its row; a consumer starting there must not
// ask where that epoch ends, which would find a cut where there is none
// and read days of records again (found by review).
func TestAnEpochIsUsedOnlyAtTheOffsetItWasStoredFor(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if _, err := f.pool.Exec(ctx, `INSERT INTO consumer_offsets (consumer, topic, partition, next_offset, leader_epoch, leader_epoch_at) VALUES
		('test.epochs', $1, 0, 40, 3, 40), ('test.epochs', $1, 1, 55, 3, 40), ('test.epochs', $1, 2, 40, NULL, 40)`, topic); err != nil {
		t.Fatal(err)
	}
	stored, err := loadStored(ctx, f.pool, "test.epochs")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]storedAt{0: {40, 3}, 1: {55, -1}, 2: {40, -1}}
	for p, w := range want {
		if got := stored[tp{topic, p}]; got != w {
			t.Errorf("partition %d: %+v, want %+v", p, got, w)
		}
	}
}

// TestAConsumerWhoseFetchesFailMakesNoProgress: a poll that comes back
// without records because its fetches failed is not an idle consumer's.
// The progress the stall alert reads stays where it was while they fail
// (the loop waits a second between such polls rather than spinning), and
// moves again once they succeed.
func TestAConsumerWhoseFetchesFailMakesNoProgress(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	runner := &Runner{Pool: f.pool, Brokers: f.brokers, Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics(reg)}
	c := Consumer{Name: "test.failing", Topics: []string{topic}, Handle: insertHandler, OffsetCheck: 200 * time.Millisecond}
	done := make(chan struct{})
	go func() { defer close(done); _ = runner.Run(ctx, c) }()
	defer func() { cancel(); <-done }()
	f.produce(t, 0, 10)
	f.waitCount(t, 10)

	progress := func() time.Time {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "pod_consumer_last_progress_timestamp_seconds" {
				return time.Unix(0, int64(mf.GetMetric()[0].GetGauge().GetValue()*1e9))
			}
		}
		t.Fatal("no progress gauge")
		return time.Time{}
	}
	var failing atomic.Bool
	failing.Store(true)
	failed := testenv.FailFetches(f.cluster, func() int16 {
		if failing.Load() {
			return kerr.TopicAuthorizationFailed.Code
		}
		return 0
	})
	since := time.Now()
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := failed.Load(); n < 4 {
			return fmt.Errorf("%d fetches failed", n)
		}
		return nil
	})
	// The poll under way when the fetches began to fail may have come
	// back empty on its own deadline a moment after since.
	if last := progress(); last.After(since.Add(c.OffsetCheck + 500*time.Millisecond)) {
		t.Fatalf("progress moved to %s, %s after the fetches began to fail", last.Format(time.RFC3339Nano), last.Sub(since))
	}
	if n, took := failed.Load(), time.Since(since); float64(n) > took.Seconds()+3 {
		t.Fatalf("%d failed fetches in %s: the loop polls again at once", n, took)
	}
	failing.Store(false)
	stopped := time.Now()
	testenv.Eventually(t, 30*time.Second, func() error {
		if last := progress(); !last.After(stopped) {
			return fmt.Errorf("progress at %s, the fetches succeed since %s", last.Format(time.RFC3339Nano), stopped.Format(time.RFC3339Nano))
		}
		return nil
	})
	f.produce(t, 10, 20)
	f.waitCount(t, 20)
}
