package delivery

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/secretbox"
)

// Hook is what the sender needs of a webhook, secrets opened.
type Hook struct {
	URL            string
	IsActive       bool
	Gen            int
	Secret         string
	PreviousSecret string // set while the previous secret still signs
}

// Hooks reads webhooks for the sender, caching each for TTL so a burst of
// deliveries to one endpoint costs one query. A change (disable, new URL,
// rotation) is seen within TTL.
type Hooks struct {
	Pool *pgxpool.Pool
	Box  *secretbox.Box
	TTL  time.Duration

	mu    sync.Mutex
	cache map[uuid.UUID]cached
}

type cached struct {
	hook *Hook // nil: no such webhook
	at   time.Time
}

// Get returns the webhook, or nil when it does not exist (deleted). A
// cached copy older than generation gen (the task was made after a
// re-activation the cache has not seen) is read again.
func (h *Hooks) Get(ctx context.Context, id uuid.UUID, gen int) (*Hook, error) {
	h.mu.Lock()
	if c, ok := h.cache[id]; ok && time.Since(c.at) < h.TTL && (c.hook == nil || c.hook.Gen >= gen) {
		h.mu.Unlock()
		return c.hook, nil
	}
	h.mu.Unlock()
	hook, err := h.load(ctx, id)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	if h.cache == nil || len(h.cache) > 100000 {
		h.cache = map[uuid.UUID]cached{}
	}
	h.cache[id] = cached{hook: hook, at: time.Now()}
	h.mu.Unlock()
	return hook, nil
}

func (h *Hooks) load(ctx context.Context, id uuid.UUID) (*Hook, error) {
	var hook Hook
	var secret string
	var prev *string
	var prevUntil *time.Time
	err := h.Pool.QueryRow(ctx, `SELECT url, is_active, gen, secret, previous_secret, previous_secret_until
		FROM webhooks WHERE id = $1`, id).Scan(&hook.URL, &hook.IsActive, &hook.Gen, &secret, &prev, &prevUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if hook.Secret, err = h.Box.Open(secret); err != nil {
		return nil, err
	}
	if prev != nil && prevUntil != nil && time.Now().Before(*prevUntil) {
		if hook.PreviousSecret, err = h.Box.Open(*prev); err != nil {
			return nil, err
		}
	}
	return &hook, nil
}
