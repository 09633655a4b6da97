package order

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
)

// TestAResentCommandsDecisionCountsOnceTheDeciderIsPastIt: a takeover's
// start_push, sent again behind the earlier worker's outcome, has its first
// decision in the table already. Read before the decider has applied the
// outcome, that decision looks current (the order still at its version);
// AwaitSent takes it only once the decider's offsets are past the resent
// command, when the order's version shows the outcome.
func TestAResentCommandsDecisionCountsOnceTheDeciderIsPastIt(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bus := &Bus{Pool: pool}
	orderID, start := uuid.New(), uuid.New()
	at := stream.Place{Topic: "pod.order.commands", Partition: 3, Offset: 41} // the resent start
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO order_state (order_id, account_id, state, version) VALUES ($1, gen_random_uuid(), '{}', 2)`, []any{orderID}},
		{`INSERT INTO order_decisions (command_id, order_id, status, version) VALUES ($1, $2, 'PROCESSING', 2)`, []any{start, orderID}},
		// The decider has applied the first start and not yet the outcome
		// (offset 40) ahead of the resent start.
		{`INSERT INTO consumer_offsets (consumer, topic, partition, next_offset) VALUES ($1, $2, $3, 40)`,
			[]any{DeciderName, at.Topic, at.Partition}},
	} {
		if _, err := pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	wake := make(chan string, 1)

	// A bare wake (the listener connected again) before the decider is
	// past the resent start: the decision is not taken.
	wake <- ""
	if d, err := bus.AwaitSent(ctx, wake, start, at, 500*time.Millisecond); !errors.Is(err, ErrUndecided) {
		t.Fatalf("before the decider is past the resent start the wait gave %+v, %v; want ErrUndecided", d, err)
	}
	if d, ok, err := LoadDecision(ctx, pool, start); err != nil || !ok || d.Current != d.Version {
		t.Fatalf("the table's decision %+v (%v, found %v) should look current then: that is the trap", d, err, ok)
	}

	// Applied up to the resent start, not the start itself: not yet.
	if _, err := pool.Exec(ctx, `UPDATE consumer_offsets SET next_offset = $2 WHERE consumer = $1`, DeciderName, at.Offset); err != nil {
		t.Fatal(err)
	}
	wake <- ""
	if d, err := bus.AwaitSent(ctx, wake, start, at, 500*time.Millisecond); !errors.Is(err, ErrUndecided) {
		t.Fatalf("with the decider at the resent start the wait gave %+v, %v; want ErrUndecided", d, err)
	}

	// The decider applies the outcome (the order fails: version 3) and the
	// resent start, and announces the start again by id alone.
	if _, err := pool.Exec(ctx, `UPDATE order_state SET version = 3 WHERE order_id = $1`, orderID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE consumer_offsets SET next_offset = 42 WHERE consumer = $1`, DeciderName); err != nil {
		t.Fatal(err)
	}
	wake <- ""
	d, err := bus.AwaitSent(ctx, wake, start, at, 5*time.Second)
	if err != nil || d.Status != schemas.StatusProcessing || d.Version != 2 || d.Current != 3 {
		t.Fatalf("once the decider is past the resent start the wait gave %+v, %v; want the start's decision (version 2) with the order at 3", d, err)
	}
}
