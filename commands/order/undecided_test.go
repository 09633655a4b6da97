package order

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/pgnotify"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/internal/wait"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// listening is a listener of the decisions' announcements on a fresh
// database, running until the test ends.
func listening(t *testing.T) *Bus {
	t.Helper()
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	l := pgnotify.New(pool, slog.New(slog.DiscardHandler), NotifyDecided)
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &Bus{Pool: pool, Notify: l}
}

// TestACreateWhoseSameContentOrderIsUndecidedIsNotRecorded: an order of
// the same content, claimed moments before, is still undecided when the
// wait for it ends. This create's command was never sent, so its error
// must not say it was (ErrUndecided makes a batch item wait for that
// command's decision forever, and a keyed POST's repeat too).
func TestACreateWhoseSameContentOrderIsUndecidedIsNotRecorded(t *testing.T) {
	bus := listening(t)
	rc := testenv.NewRedis(t)
	prefix := "test" + testenv.RandomSuffix() + ":"
	c := &Creator{Bus: bus, Redis: rc, Prefix: prefix, Log: slog.New(slog.DiscardHandler), Wait: 200 * time.Millisecond}
	d := Draft{StoreID: uuid.New(), ContentHash: "same-content"}
	other := uuid.New()
	claim := fmt.Sprintf("%s|%s|%d", other, uuid.New(), time.Now().Unix())
	if err := rc.Set(context.Background(), prefix+"dup:"+d.StoreID.String()+":"+d.ContentHash, claim, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.softDuplicate(context.Background(), d, uuid.New(), uuid.New())
	if !errors.Is(err, ErrClaimUndecided) || errors.Is(err, ErrUndecided) {
		t.Fatalf("the error is %v; want ErrClaimUndecided, not ErrUndecided", err)
	}
}

// TestAContentClaimUndecidedForAMinuteIsTakenOnlyWhenItsCommandIsNotOnTheLog:
// a claim undecided for over a minute was taken as never sent. Its
// command may be on the log, waiting for a decider far behind: taken
// then, the same content was ordered twice (found by review).
func TestAContentClaimUndecidedForAMinuteIsTakenOnlyWhenItsCommandIsNotOnTheLog(t *testing.T) {
	for _, onLog := range []bool{true, false} {
		name := map[bool]string{true: "a claim whose command is on the log, not yet read, is kept",
			false: "a claim whose command is not on the log, read to its end, is taken"}[onLog]
		t.Run(name, func(t *testing.T) {
			bus := listening(t)
			bus.Naming = schemas.Naming{}
			topic := bus.Naming.Topic(schemas.TopicOrderCommands)
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cluster.Close)
			if bus.Producer, err = kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(bus.Producer.Close)
			ctx := context.Background()
			holder := Command{ID: uuid.New(), Kind: KindCreate, OrderID: uuid.New(), AccountID: uuid.New()}
			if onLog {
				rec, err := Record(bus.Naming, holder)
				if err != nil {
					t.Fatal(err)
				}
				if err := bus.Producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			rc := testenv.NewRedis(t)
			prefix := "test" + testenv.RandomSuffix() + ":"
			c := &Creator{Bus: bus, Redis: rc, Prefix: prefix, Log: slog.New(slog.DiscardHandler), Wait: 300 * time.Millisecond}
			d := Draft{StoreID: uuid.New(), ContentHash: "same-content"}
			key := prefix + "dup:" + d.StoreID.String() + ":" + d.ContentHash
			claim := fmt.Sprintf("%s|%s|%d", holder.OrderID, holder.ID, time.Now().Add(-2*time.Minute).Unix())
			if err := rc.Set(ctx, key, claim, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			mine := uuid.New()
			_, release, err := c.softDuplicate(ctx, d, mine, uuid.New())
			held, _ := rc.Get(ctx, key).Result()
			if onLog {
				if !errors.Is(err, ErrClaimUndecided) || held != claim {
					t.Fatalf("the create went on (%v) with the claim %q; want ErrClaimUndecided and the holder's claim kept", err, held)
				}
				return
			}
			defer release()
			if err != nil || len(held) < 36 || held[:36] != mine.String() {
				t.Fatalf("the create was refused (%v) with the claim %q; want the claim taken", err, held)
			}
		})
	}
}

// TestACommandOnTheLogWhoseWaitIsCutShortIsUndecided: the request's
// context ends (a shutdown) after the command reached the log and before
// its decision. The command will still be decided, so the error is
// ErrUndecided, not the context's.
func TestACommandOnTheLogWhoseWaitIsCutShortIsUndecided(t *testing.T) {
	bus := listening(t)
	naming := schemas.Naming{}
	topic := naming.Topic(schemas.TopicOrderCommands)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	bus.Producer, err = kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Producer.Close)
	bus.Naming = naming

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// No decider runs: once the command is on the log, the request
		// is cut short.
		_ = wait.Until[struct{}](ctx, nil, 10*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			ends, err := kadm.NewClient(bus.Producer).ListEndOffsets(ctx, topic)
			if err != nil {
				return false, nil
			}
			o, _ := ends.Lookup(topic, 0)
			return o.Offset > 0, nil
		})
		cancel()
	}()
	id := uuid.New()
	_, err = bus.DecideNew(ctx, Command{ID: id, Kind: KindCreate, OrderID: uuid.New(), AccountID: uuid.New()}, time.Minute)
	if !errors.Is(err, ErrUndecided) {
		t.Fatalf("the error is %v; want ErrUndecided", err)
	}
}

// testVariants serves the validation tests' catalog to a Creator.
type testVariants struct{}

func (testVariants) Variants(_ context.Context, _ uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]Variant, error) {
	all, out := testCatalog(), map[uuid.UUID]Variant{}
	for _, id := range ids {
		if v, ok := all[id]; ok {
			out[id] = v
		}
	}
	return out, nil
}

func (testVariants) Rates(context.Context) (Rates, error) { return testRates(), nil }

// TestACreateWhoseSendFailsKeepsItsContentClaimed: the broker may append
// a command whose produce failed (a timeout after the write), so the
// create keeps the content's soft duplicate claim. Released, a second
// create of the same content under another reference would not be found
// a duplicate should the first command be decided.
func TestACreateWhoseSendFailsKeepsItsContentClaimed(t *testing.T) {
	bus := listening(t)
	rc := testenv.NewRedis(t)
	// A broker that answers nothing: every produce times out.
	var err error
	bus.Producer, err = kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.RecordDeliveryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Producer.Close)
	prefix := "test" + testenv.RandomSuffix() + ":"
	c := &Creator{Catalog: testVariants{}, Bus: bus, Redis: rc, Prefix: prefix, Log: slog.New(slog.DiscardHandler), Wait: time.Second}
	body := with(t, nil)
	d, err := validate(t, body)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Create(context.Background(), CreateInput{AccountID: uuid.New(), Body: body, Via: "api"})
	if !errors.Is(err, ErrCommandLog) {
		t.Fatalf("the error is %v; want ErrCommandLog", err)
	}
	held, err := rc.Get(context.Background(), prefix+"dup:"+d.StoreID.String()+":"+d.ContentHash).Result()
	if err != nil {
		t.Fatalf("the content's claim: %v; want it kept", err)
	}
	if want := OrderID(d.StoreID, d.ReferenceID).String() + "|"; len(held) < len(want) || held[:len(want)] != want {
		t.Errorf("the content's claim is %q; want it held by order %s", held, want)
	}
}

// TestACreateThatMayBeOnTheLogAndCannotLookItUpDoesNotKnow: a batch item
// an earlier lease may have sent looks its decision up first; when that
// read fails, whether its command is on the log is not known
// (ErrLogUnread, which keeps the item open), not an error of the create
// to store as its answer.
func TestACreateThatMayBeOnTheLogAndCannotLookItUpDoesNotKnow(t *testing.T) {
	bus := listening(t)
	pool := pgtest.NewPool(t)
	pool.Close()
	bus.Pool = pool
	c := &Creator{Catalog: testVariants{}, Bus: bus, Log: slog.New(slog.DiscardHandler), Wait: time.Second}
	in := CreateInput{AccountID: uuid.New(), Body: with(t, nil), Via: "api", CommandID: uuid.New(), MaybeSent: true}
	if _, err := c.Create(context.Background(), in); !errors.Is(err, ErrLogUnread) {
		t.Fatalf("the error is %v; want ErrLogUnread", err)
	}
	in.MaybeSent = false // a keyed POST's first lookup: its error is what it is
	if _, err := c.Create(context.Background(), in); err == nil || errors.Is(err, ErrLogUnread) {
		t.Fatalf("the error is %v; want the lookup's own", err)
	}
}

// TestOnlyASizeRefusalLeavesACommandOffTheLogForCertain: a batch item
// whose send failed stays open until its command is known to be off the
// log, unless the broker refused the record for its size, which no retry
// changes.
func TestOnlyASizeRefusalLeavesACommandOffTheLogForCertain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"a record too large for the broker is refused", kerr.MessageTooLarge, true},
		{"a batch too large for the broker is refused", kerr.RecordListTooLarge, true},
		{"a produce that timed out may be on the log", kgo.ErrRecordTimeout, false},
		{"a produce cut short by its context may be on the log", context.DeadlineExceeded, false},
		{"a leader change may leave it on the log", kerr.NotLeaderForPartition, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fmt.Errorf("%w: %w", ErrCommandLog, tc.err)
			if got := Refused(err); got != tc.refused {
				t.Fatalf("Refused(%v) = %v, want %v", err, got, tc.refused)
			}
		})
	}
}
