package order

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestACommandSentAgainIsAnnouncedAgain: a command decided in an earlier
// batch and sent again (a push taken over sends its start_push again) is
// not decided twice, and its decision is announced again, by id alone, so
// the one waiting on the repeat reads it from the table.
// listenDecided is a connection of pool listening for the order
// decider's announcements until the test ends.
func listenDecided(t *testing.T, ctx context.Context, pool *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	listen, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = listen.Conn().Close(context.Background()) // it holds LISTEN state
		listen.Release()
	})
	if _, err := listen.Exec(ctx, "LISTEN "+NotifyDecided); err != nil {
		t.Fatal(err)
	}
	return listen
}

func TestACommandSentAgainIsAnnouncedAgain(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listen := listenDecided(t, ctx, pool)

	handle := (&Decider{Log: slog.New(slog.DiscardHandler)}).Consumer().Handle
	c := Command{ID: uuid.New(), Kind: KindCancel, OrderID: uuid.New()} // no such order: refused
	rec, err := Record(schemas.Naming{}, c)
	if err != nil {
		t.Fatal(err)
	}
	rec.Timestamp = time.Now()
	for _, round := range []struct {
		name       string
		bareAnswer bool
	}{{"first", false}, {"again", true}} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := handle(ctx, tx, []*kgo.Record{rec}); err != nil {
			t.Fatalf("%s: %v", round.name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		n, err := listen.Conn().WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("%s: no announcement: %v", round.name, err)
		}
		id, value, _ := strings.Cut(n.Payload, " ")
		if id != c.ID.String() || (value == "") != round.bareAnswer {
			t.Fatalf("%s: announced %q; want the command's id, with its decision %v", round.name, n.Payload, !round.bareAnswer)
		}
	}
	d, ok, err := LoadDecision(ctx, pool, c.ID)
	if err != nil || !ok || d.Code != schemas.CodeNotFound {
		t.Fatalf("stored decision %+v (found %v, %v); want the first one, %s", d, ok, err, schemas.CodeNotFound)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM order_decisions WHERE command_id = $1`, c.ID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d decisions stored (%v), want 1", n, err)
	}
}

// TestAnOrderWhoseStoredStateCannotBeReadFailsItsCommandForGood: a state
// row the decider cannot read (a corrupt row, a format it does not know)
// fails the batch as poison, so the runner dead-letters that order's
// command rather than retrying the partition's batch without end (found
// by review).
func TestAnOrderWhoseStoredStateCannotBeReadFailsItsCommandForGood(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	id := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO order_state (order_id, account_id, state, version) VALUES ($1, $2, '{"status": 7}', 1)`,
		id, uuid.New()); err != nil {
		t.Fatal(err)
	}
	rec, err := Record(schemas.Naming{}, Command{ID: uuid.New(), Kind: KindCancel, OrderID: id})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, err = (&Decider{Log: slog.New(slog.DiscardHandler)}).Consumer().Handle(ctx, tx, []*kgo.Record{rec})
	if err == nil || !stream.IsPermanent(err) {
		t.Fatalf("a command of an order whose state cannot be read: %v; want a permanent failure", err)
	}
}

// TestAnUpdateAheadOfItsPushOutcomeAppliesOnceThePushSucceeds: production
// acknowledges an order while its push's outcome is still to be decided (the
// worker stopped after the call). The update is held in the order's stored
// state, not refused, and the push's success applies it, alike when the
// batch is decided again after a crash.
func TestAnUpdateAheadOfItsPushOutcomeAppliesOnceThePushSucceeds(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	handle := (&Decider{Log: slog.New(slog.DiscardHandler)}).Consumer().Handle
	id := uuid.New()
	onOrder := func(c *Command) { c.OrderID = id }
	track := &schemas.Tracking{TrackingNumber: "1Z9", Carrier: "UPS", TrackingURL: "https://t.example/1Z9", ShipmentStatus: "in_transit"}
	decide := func(commit bool, cs ...Command) []*kgo.Record {
		t.Helper()
		var recs []*kgo.Record
		for i, c := range cs {
			rec, err := Record(schemas.Naming{}, c)
			if err != nil {
				t.Fatal(err)
			}
			rec.Timestamp = t0.Add(time.Duration(i) * time.Second)
			recs = append(recs, rec)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		out, err := handle(ctx, tx, recs)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	decide(true, cmd(KindCreate, onOrder), cmd(KindStartPush, onOrder))
	sync := cmd(KindFulfillment, onOrder, fulfil("SYNCED", track))
	if out := decide(true, sync); len(out) != 0 {
		t.Fatalf("an update ahead of the push's outcome emitted %d events; want it held", len(out))
	}
	d, ok, err := LoadDecision(ctx, pool, sync.ID)
	if err != nil || !ok || !d.Accepted() || d.Status != schemas.StatusProcessing {
		t.Fatalf("the held update's decision is %+v (found %v, %v); want accepted, the order still PROCESSING", d, ok, err)
	}

	complete := cmd(KindCompletePush, onOrder, attempt(1))
	first := decide(false, complete) // rolled back: a crash before the commit
	again := decide(true, complete)
	want := []string{schemas.TypeOrderStatusUpdated, schemas.TypeOrderStatusUpdated, schemas.TypeTrackingCreated}
	if len(again) != len(want) {
		t.Fatalf("the push's success emitted %d events, want %d (its own, then the held update's)", len(again), len(want))
	}
	for i, rec := range again {
		var ev schemas.Event
		if err := codec.Unmarshal(rec.Value, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != want[i] || string(rec.Headers[1].Value) != strconv.Itoa(3+i) {
			t.Fatalf("event %d is %s at version %s; want %s at %d", i, ev.Type, rec.Headers[1].Value, want[i], 3+i)
		}
		if string(rec.Value) != string(first[i].Value) {
			t.Fatalf("event %d differs when the batch is decided again:\n%s\n%s", i, first[i].Value, rec.Value)
		}
	}
	var status string
	var held int
	if err := pool.QueryRow(ctx, `SELECT state->>'status', coalesce(jsonb_array_length(state->'held'), 0) FROM order_state WHERE order_id = $1`, id).Scan(&status, &held); err != nil {
		t.Fatal(err)
	}
	if status != schemas.StatusSynced || held != 0 {
		t.Fatalf("the order is %s holding %d updates; want SYNCED holding none", status, held)
	}
}

// TestADeadLetteredCreateIsRefusedAndAnnounced: a create whose record the
// decider dead-letters is refused for good (INTERNAL_ERROR) in the
// transaction that passes it, and the refusal is announced with its
// decision: the POST or batch item waiting for it learns the order was
// not created. A replay of the dead letter finds the command decided and
// creates nothing. Other commands are left to a replay: nothing recorded.
func TestADeadLetteredCreateIsRefusedAndAnnounced(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listen := listenDecided(t, ctx, pool)
	consumer := (&Decider{Log: slog.New(slog.DiscardHandler)}).Consumer()
	inTx := func(f func(tx pgx.Tx) error) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, pool, f); err != nil {
			t.Fatal(err)
		}
	}
	record := func(c Command) *kgo.Record {
		t.Helper()
		rec, err := Record(schemas.Naming{}, c)
		if err != nil {
			t.Fatal(err)
		}
		rec.Timestamp = time.Now()
		return rec
	}
	cancelled := Command{ID: uuid.New(), Kind: KindCancel, OrderID: uuid.New()}
	inTx(func(tx pgx.Tx) error { return consumer.OnDeadLetter(ctx, tx, record(cancelled), errors.New("a bug")) })
	if _, ok, err := LoadDecision(ctx, pool, cancelled.ID); err != nil || ok {
		t.Fatalf("a dead-lettered cancel has a decision (%v, %v); want none, for a replay to apply", ok, err)
	}

	create := Command{ID: uuid.New(), Kind: KindCreate, OrderID: uuid.New(), AccountID: uuid.New()}
	inTx(func(tx pgx.Tx) error { return consumer.OnDeadLetter(ctx, tx, record(create), errors.New("a bug")) })
	n, err := listen.Conn().WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id, value, _ := strings.Cut(n.Payload, " "); id != create.ID.String() || !strings.Contains(value, schemas.CodeInternal) {
		t.Fatalf("announced %q; want the create's id with its refusal", n.Payload)
	}
	if d, ok, err := LoadDecision(ctx, pool, create.ID); err != nil || !ok || d.Code != schemas.CodeInternal {
		t.Fatalf("stored decision %+v (found %v, %v); want the refusal", d, ok, err)
	}
	// The replay.
	inTx(func(tx pgx.Tx) error {
		_, err := consumer.Handle(ctx, tx, []*kgo.Record{record(create)})
		return err
	})
	var states, decisions int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM order_state WHERE order_id = $1), (SELECT count(*) FROM order_decisions WHERE command_id = $2)`,
		create.OrderID, create.ID).Scan(&states, &decisions); err != nil || states != 0 || decisions != 1 {
		t.Fatalf("after the replay: %d order states, %d decisions (%v); want none and the refusal", states, decisions, err)
	}
}
