package pgnotify

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/testenv"
)

// TestAnnouncedValueNeedsNoLookup: a decision announced with its content
// reaches the waiter without a read of the database; one announced by key
// alone is looked up; and a first look that fails does not keep the
// command from being sent.
func TestAnnouncedValueNeedsNoLookup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pg.Open(ctx, testenv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l := New(pool, slog.New(slog.DiscardHandler), "decided")
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// Once a notification arrives, the listener is connected: its wake of
	// everyone on connecting is behind us.
	ready, stop := l.Subscribe("decided", "ready")
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, err := pool.Exec(ctx, `SELECT pg_notify('decided', 'ready')`); err != nil {
			return err
		}
		select {
		case <-ready:
			return nil
		case <-time.After(50 * time.Millisecond):
			return testenv.Errorf("the listener is not listening yet")
		}
	})
	stop()

	var loads atomic.Int32
	announcement := func(stored string) Announcement[string] {
		return Announcement[string]{
			Load: func(context.Context) (string, bool, error) {
				loads.Add(1)
				return stored, stored != "", nil
			},
			Parse: func(v string) (string, bool) { return "parsed " + v, true },
		}
	}
	for _, tc := range []struct {
		name, payload, stored, want string
		loads                       int32
	}{
		{"a value is parsed, not loaded", "cmd-1 accepted", "", "parsed accepted", 0},
		{"a bare key is loaded", "cmd-2", "from the table", "from the table", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loads.Store(0)
			id, _, _ := strings.Cut(tc.payload, " ")
			// The listener is listening (above): one notification is delivered.
			got, err := DecideNew(ctx, l, "decided", id, 10*time.Second, announcement(tc.stored), func(ctx context.Context) error {
				_, err := pool.Exec(ctx, `SELECT pg_notify('decided', $1)`, tc.payload)
				return err
			})
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
			if n := loads.Load(); n != tc.loads {
				t.Errorf("%d loads, want %d", n, tc.loads)
			}
		})
	}

	// A first look that fails does not end the request: the command is
	// sent, and its decision awaited.
	sent := 0
	failing := Announcement[string]{
		Load:  func(context.Context) (string, bool, error) { return "", false, errors.New("the database blinked") },
		Parse: func(v string) (string, bool) { return "parsed " + v, true },
	}
	got, err := Decide(ctx, l, "decided", "cmd-3", 10*time.Second, failing, func(ctx context.Context) error {
		sent++
		_, err := pool.Exec(ctx, `SELECT pg_notify('decided', 'cmd-3 accepted')`)
		return err
	})
	if err != nil || got != "parsed accepted" || sent != 1 {
		t.Fatalf("after a failed first look: %q, %v, sent %d times; want the decision, sent once", got, err, sent)
	}
}
