package cache

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/pgnotify"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/testenv"
)

func TestALoadThatBeganBeforeADropIsNotKept(t *testing.T) {
	c := Cache[string, int]{Name: "t", TTL: time.Minute}
	gen := c.Gen()
	c.Drop() // a change announced while the load was reading
	c.Put(gen, "k", 1)
	if _, ok := c.Get("k"); ok {
		t.Fatal("an answer read before the drop was kept")
	}
	c.Put(c.Gen(), "k", 2)
	if v, ok := c.Get("k"); !ok || v != 2 {
		t.Fatalf("an answer read after the drop: %d %v", v, ok)
	}
}

func TestAnEntryExpiresAfterItsTTL(t *testing.T) {
	c := Cache[string, int]{Name: "t", TTL: -time.Second} // expired as soon as it is put
	c.Put(c.Gen(), "k", 1)
	if _, ok := c.Get("k"); ok {
		t.Fatal("an expired entry was answered")
	}
}

// TestAnAnnouncementDropsTheCacheWhenItsTransactionCommits announces a
// change in a transaction and checks that the cache is dropped.
func TestAnAnnouncementDropsTheCacheWhenItsTransactionCommits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pool := pgtest.NewPool(t)
	defer cancel() // before the pool closes: the listener holds a connection
	l := pgnotify.New(pool, slog.New(slog.DiscardHandler), Notify)
	go l.Run(ctx)
	c := &Cache[string, int]{Name: "tokens", TTL: time.Minute}
	c.Follow(ctx, l)

	announce := func(name string) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			QueueAnnounce(b, name)
			return tx.SendBatch(ctx, b).Close()
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Announced until the listener, started above, hears it.
	c.Put(c.Gen(), "k", 1)
	testenv.Eventually(t, 10*time.Second, func() error {
		announce("tokens")
		if _, ok := c.Get("k"); ok {
			return fmt.Errorf("still cached after its announcement")
		}
		return nil
	})
}

func TestLoadManyKeepsWhatExistsAndAsksAgainForTheRest(t *testing.T) {
	c := Cache[string, int]{Name: "t", TTL: time.Minute}
	var asked [][]string
	load := func(missing []string) (map[string]int, error) {
		asked = append(asked, missing)
		return map[string]int{"a": 1}, nil // "b" does not exist
	}
	for range 2 {
		got, err := c.LoadMany([]string{"a", "b", "a"}, load)
		if err != nil || len(got) != 1 || got["a"] != 1 {
			t.Fatalf("LoadMany: %v %v", got, err)
		}
	}
	if len(asked) != 2 || len(asked[0]) != 2 || len(asked[1]) != 1 || asked[1][0] != "b" {
		t.Fatalf("loads asked for %v, want [a b] then [b]", asked)
	}
}
