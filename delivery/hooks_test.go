package delivery

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/secretbox"
	"github.com/printpod/pod/internal/testenv"
)

// TestHooksNeverServeAReadOlderThanTheCall rotates a webhook's secret over
// and over while many goroutines Get it: every Get returns the secret of a
// rotation committed at or after the last one committed before the call
// (shared reads never reach back before a caller), and nothing is left
// behind once the callers are done.
func TestHooksNeverServeAReadOlderThanTheCall(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	box, err := secretbox.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	seal := func(v int) string {
		s, err := box.Seal(fmt.Sprintf("whsec_v%d", v))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	id := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO webhooks (id, account_id, url, topics, is_active, gen, secret, created_at, updated_at)
		VALUES ($1, $2, 'https://example.com/h', '{order.created}', true, 1, $3, now(), now())`, id, uuid.New(), seal(0)); err != nil {
		t.Fatal(err)
	}
	h := &Hooks{Pool: pool, Box: box}
	var committed atomic.Int64 // the last rotation known committed
	done := make(chan struct{})
	var wg sync.WaitGroup
	var gets atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				floor := committed.Load()
				hook, err := h.Get(ctx, id)
				if err != nil {
					t.Error(err)
					return
				}
				v, err := strconv.ParseInt(strings.TrimPrefix(hook.Secret, "whsec_v"), 10, 64)
				if err != nil {
					t.Error(err)
					return
				}
				if v < floor {
					t.Errorf("Get called after rotation %d returned the secret of rotation %d", floor, v)
					return
				}
				gets.Add(1)
			}
		}()
	}
	for v := 1; v <= 100; v++ {
		if _, err := pool.Exec(ctx, `UPDATE webhooks SET secret = $2, updated_at = now() WHERE id = $1`, id, seal(v)); err != nil {
			t.Fatal(err)
		}
		committed.Store(int64(v))
	}
	close(done)
	wg.Wait()
	if gets.Load() == 0 {
		t.Fatal("no Get returned")
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.reads) != 0 {
			return fmt.Errorf("%d webhooks still have reads", len(h.reads))
		}
		return nil
	})
	if hook, err := h.Get(ctx, uuid.New()); err != nil || hook != nil {
		t.Fatalf("Get of an unknown webhook = %v, %v", hook, err)
	}
}
