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
	// Unsigned: the secret would not open (sealed with a key the service
	// no longer has, or damaged). No request can be signed: the sender
	// records the attempt as not made, and retries it as a failure, so
	// the delivery waits for the key to come back without holding up the
	// endpoint's others.
	Unsigned bool
}

// Hooks reads webhooks for the sender. Every Get reads the webhook's row
// as it is after Get was called, never an older copy: a change the decider
// has answered (a rotation, a disable, a new URL) is in effect for every
// attempt made after the answer. A copy kept for any time, however short,
// would sign a delivery sent right after a rotation with the old secret
// only. The read is one primary-key lookup, small next to the request it
// precedes; concurrent Gets of one webhook share one read that began after
// they were called, so a burst to one endpoint holds at most one query in
// flight and one waiting.
type Hooks struct {
	Pool *pgxpool.Pool
	Box  *secretbox.Box

	mu    sync.Mutex
	reads map[uuid.UUID]*hookReads
}

// hookReads are the reads of one webhook: the one running and the one that
// starts when it ends (joined by every Get called meanwhile, as the running
// one may have begun before them).
type hookReads struct {
	running, next *hookRead
}

type hookRead struct {
	done chan struct{}
	hook *Hook
	err  error
}

// readTimeout bounds one read of a webhook (shared by its callers, so not
// bound to any one caller's context).
const readTimeout = 10 * time.Second

// Get returns the webhook as stored now, or nil when it does not exist
// (deleted).
func (h *Hooks) Get(ctx context.Context, id uuid.UUID) (*Hook, error) {
	h.mu.Lock()
	if h.reads == nil {
		h.reads = map[uuid.UUID]*hookReads{}
	}
	rs := h.reads[id]
	if rs == nil {
		rs = &hookReads{}
		h.reads[id] = rs
	}
	r := rs.next
	if r == nil {
		r = &hookRead{done: make(chan struct{})}
		if rs.running == nil {
			rs.running = r
			go h.read(id, rs, r)
		} else {
			rs.next = r
		}
	}
	h.mu.Unlock()
	select {
	case <-r.done:
		return r.hook, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// read loads the webhook for r's callers, then starts the read waiting
// behind it, if any.
func (h *Hooks) read(id uuid.UUID, rs *hookReads, r *hookRead) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	r.hook, r.err = h.load(ctx, id)
	cancel()
	close(r.done)
	h.mu.Lock()
	defer h.mu.Unlock()
	if rs.next != nil {
		rs.running, rs.next = rs.next, nil
		go h.read(id, rs, rs.running)
		return
	}
	rs.running = nil
	delete(h.reads, id)
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
	// A secret that will not open stays so: reading it again cannot help.
	if hook.Secret, err = h.Box.Open(secret); err != nil {
		hook.Unsigned = true
	}
	if prev != nil && prevUntil != nil && time.Now().Before(*prevUntil) {
		// The previous secret only adds a second signature: without it the
		// current one signs alone.
		hook.PreviousSecret, _ = h.Box.Open(*prev)
	}
	return &hook, nil
}
