package order

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestACommandSentAgainIsAnnouncedAgain: a command decided in an earlier
// batch and sent again (a push taken over sends its start_push again) is
// not decided twice, and its decision is announced again, by id alone, so
// the one waiting on the repeat reads it from the table.
func TestACommandSentAgainIsAnnouncedAgain(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listen, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = listen.Conn().Close(context.Background()) // it holds LISTEN state
		listen.Release()
	}()
	if _, err := listen.Exec(ctx, "LISTEN "+NotifyDecided); err != nil {
		t.Fatal(err)
	}

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
