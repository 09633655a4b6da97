// Package pgnotify lets many goroutines wait for Postgres NOTIFY messages
// over one listening connection. A waiter always re-checks the database
// itself, on every notification and on a short tick, so a notification lost
// while the connection was being re-established costs latency, not
// correctness.
package pgnotify

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/wait"
)

// Listener listens on a fixed set of channels.
type Listener struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	channels []string

	mu   sync.Mutex
	subs map[key]map[chan struct{}]struct{}
}

type key struct{ channel, payload string }

// New returns a listener; Run must be running for notifications to arrive.
func New(pool *pgxpool.Pool, log *slog.Logger, channels ...string) *Listener {
	return &Listener{pool: pool, log: log, channels: channels, subs: map[key]map[chan struct{}]struct{}{}}
}

// Run holds a connection that LISTENs on the channels until ctx ends,
// reconnecting after failures.
func (l *Listener) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := l.listen(ctx); err != nil && ctx.Err() == nil {
			l.log.Warn("notification listener failed; reconnecting", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (l *Listener) listen(ctx context.Context) error {
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection carried LISTEN state: never hand it back to the pool.
	defer func() {
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}()
	for _, ch := range l.channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	l.wakeAll() // anything sent while not listening: let waiters re-check
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.wake(key{n.Channel, n.Payload})
	}
}

func (l *Listener) wake(k key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.subs[k] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (l *Listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, set := range l.subs {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Subscribe returns a channel that receives a signal (coalesced) whenever
// channel gets a notification with payload, or the connection was
// re-established; call cancel when done.
func (l *Listener) Subscribe(channel, payload string) (<-chan struct{}, func()) {
	k := key{channel, payload}
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	if l.subs[k] == nil {
		l.subs[k] = map[chan struct{}]struct{}{}
	}
	l.subs[k][ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.subs[k], ch)
		if len(l.subs[k]) == 0 {
			delete(l.subs, k)
		}
		l.mu.Unlock()
	}
}

// Wait returns once check reports done, re-checking whenever channel gets
// a notification with payload, and at least every poll. It returns ctx's
// error when ctx ends first.
func (l *Listener) Wait(ctx context.Context, channel, payload string, poll time.Duration, check func(context.Context) (bool, error)) error {
	ch, cancel := l.Subscribe(channel, payload)
	defer cancel()
	return wait.Until(ctx, ch, poll, true, check)
}

// SafetyPoll is how often a waiter looks without being notified. The
// notification is what wakes it (and every subscriber is woken when the
// listening connection is re-established), so this is only a safety net.
// It must stay long: each waiting request looks once per period, and under
// overload thousands wait, so a short period multiplies the very load
// that made them wait (at 250 ms, loading decisions took a quarter of
// podsvc's CPU at 1,000 orders/s).
const SafetyPoll = 2 * time.Second

// Await waits up to wait for load to find a value (a decision), woken by
// notifications on channel with payload and at least every SafetyPoll. It
// returns context.DeadlineExceeded when the wait ends first.
func Await[T any](ctx context.Context, l *Listener, channel, payload string, wait time.Duration,
	load func(context.Context) (T, bool, error)) (T, error) {
	ch, cancel := l.Subscribe(channel, payload)
	defer cancel()
	return awaitOn(ctx, ch, wait, true, load)
}

// Decide is how a request gets the decision of its command: the decision
// load finds already (a repeated command), or else, after send, the one
// awaited up to wait (context.DeadlineExceeded when none came). The
// subscription is made before the first look, so a decision made after it
// cannot be missed, and the next look is made only when notified (or at a
// poll).
func Decide[T any](ctx context.Context, l *Listener, channel, payload string, wait time.Duration,
	load func(context.Context) (T, bool, error), send func(context.Context) error) (T, error) {
	return decide(ctx, l, channel, payload, wait, true, load, send)
}

// DecideNew is Decide for a command whose id was never used before (made
// for this request): there is nothing to look up before sending, so the
// decision is loaded once, when notified.
func DecideNew[T any](ctx context.Context, l *Listener, channel, payload string, wait time.Duration,
	load func(context.Context) (T, bool, error), send func(context.Context) error) (T, error) {
	return decide(ctx, l, channel, payload, wait, false, load, send)
}

func decide[T any](ctx context.Context, l *Listener, channel, payload string, wait time.Duration, lookFirst bool,
	load func(context.Context) (T, bool, error), send func(context.Context) error) (T, error) {
	ch, cancel := l.Subscribe(channel, payload)
	defer cancel()
	if lookFirst {
		if v, ok, err := load(ctx); err != nil || ok {
			return v, err
		}
	}
	if err := send(ctx); err != nil {
		var zero T
		return zero, err
	}
	return awaitOn(ctx, ch, wait, false, load)
}

// awaitOn waits up to limit on a subscription already made for load to find
// a value; checkFirst looks once before the first wake.
func awaitOn[T any](ctx context.Context, ch <-chan struct{}, limit time.Duration, checkFirst bool,
	load func(context.Context) (T, bool, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var out T
	err := wait.Until(ctx, ch, SafetyPoll, checkFirst, func(ctx context.Context) (bool, error) {
		v, ok, err := load(ctx)
		out = v
		return ok, err
	})
	return out, err
}
