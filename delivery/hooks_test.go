package delivery

import (
	"bytes"
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

// TestAHookWhoseSecretsWillNotOpenIsStillRead: a webhook whose secret was
// sealed with a key the service no longer has is read as Unsigned, so the
// sender records its attempts instead of reading it again forever; a
// previous secret that will not open only takes away the second signature.
func TestAHookWhoseSecretsWillNotOpenIsStillRead(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	box, err := secretbox.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	lost, err := secretbox.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	seal := func(b *secretbox.Box, s string) string {
		v, err := b.Seal(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	h := &Hooks{Pool: pool, Box: box}
	for _, tc := range []struct {
		name         string
		secret, prev string
		want         Hook
	}{
		{"a secret sealed with a lost key leaves the hook unsigned", seal(lost, "whsec_a"), seal(box, "whsec_b"),
			Hook{URL: "https://example.com/h", IsActive: true, Gen: 1, PreviousSecret: "whsec_b", Unsigned: true}},
		{"a previous secret sealed with a lost key is left out", seal(box, "whsec_a"), seal(lost, "whsec_b"),
			Hook{URL: "https://example.com/h", IsActive: true, Gen: 1, Secret: "whsec_a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := uuid.New()
			if _, err := pool.Exec(ctx, `INSERT INTO webhooks (id, account_id, url, topics, is_active, gen, secret, previous_secret,
				previous_secret_until, created_at, updated_at)
				VALUES ($1, $2, 'https://example.com/h', '{order.created}', true, 1, $3, $4, now() + interval '1 hour', now(), now())`,
				id, uuid.New(), tc.secret, tc.prev); err != nil {
				t.Fatal(err)
			}
			got, err := h.Get(ctx, id)
			if err != nil || got == nil || *got != tc.want {
				t.Fatalf("Get: %+v (%v), want %+v", got, err, tc.want)
			}
		})
	}
}
