// Package pgnotify lets many goroutines wait for Postgres NOTIFY messages
// over one listening connection. A payload is a key (what a waiter
// subscribes to, e.g. a command id), optionally followed by a space and a
// value (what was announced, e.g. the decision): a waiter given the value
// needs no lookup. Without one (a payload that was only a key, a wake after
// the connection was re-established, a poll) the waiter checks the
// database itself, so a notification lost while reconnecting costs
// latency, not correctness.
package pgnotify

import (
	"context"
	"log/slog"
	"strings"
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
	subs map[key]map[chan string]struct{}
}

type key struct{ channel, id string }

// New returns a listener; Run must be running for notifications to arrive.
func New(pool *pgxpool.Pool, log *slog.Logger, channels ...string) *Listener {
	return &Listener{pool: pool, log: log, channels: channels, subs: map[key]map[chan string]struct{}{}}
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
		k, v, _ := strings.Cut(n.Payload, " ")
		l.wake(key{n.Channel, k}, v)
	}
}

func (l *Listener) wake(k key, v string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.subs[k] {
		offer(ch, v)
	}
}

func (l *Listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, set := range l.subs {
		for ch := range set {
			offer(ch, "")
		}
	}
}

// offer delivers v without blocking: a value waiting unread is replaced
// by a newer one that has content (the newest announcement wins; a bare
// wake never hides a value).
func offer(ch chan string, v string) {
	select {
	case ch <- v:
		return
	default:
	}
	if v == "" {
		return
	}
	select {
	case <-ch:
	default:
	}
	select {
	case ch <- v:
	default:
	}
}

// Subscribe returns a channel that receives (coalesced) the value of each
// notification on channel whose key is id ("" when it had none), and ""
// when the connection was re-established; call cancel when done.
func (l *Listener) Subscribe(channel, id string) (<-chan string, func()) {
	k := key{channel, id}
	ch := make(chan string, 1)
	l.mu.Lock()
	if l.subs[k] == nil {
		l.subs[k] = map[chan string]struct{}{}
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

// Announcement is how a waiter reads a value: from a notification's value
// when it has one (Parse), else from the database (Load; ok false while
// there is nothing yet).
type Announcement[T any] struct {
	Load  func(context.Context) (T, bool, error)
	Parse func(value string) (T, bool)
}

func (a Announcement[T]) read(ctx context.Context, value string) (T, bool, error) {
	if value != "" && a.Parse != nil {
		if v, ok := a.Parse(value); ok {
			return v, true, nil
		}
	}
	return a.Load(ctx)
}

// SafetyPoll is how often a waiter looks without being notified. The
// notification is what wakes it (and every subscriber is woken when the
// listening connection is re-established), so this is only a safety net.
// It must stay long: each waiting request looks once per period, and under
// overload thousands wait, so a short period multiplies the very load
// that made them wait (at 250 ms, loading decisions took a quarter of
// podsvc's CPU at 1,000 orders/s).
const SafetyPoll = 2 * time.Second

// Await waits up to wait for a value (a decision), woken by notifications
// on channel with key and at least every SafetyPoll. It returns
// context.DeadlineExceeded when the wait ends first.
func Await[T any](ctx context.Context, l *Listener, channel, key string, wait time.Duration, a Announcement[T]) (T, error) {
	ch, cancel := l.Subscribe(channel, key)
	defer cancel()
	return awaitOn(ctx, ch, wait, true, a)
}

// Decide is how a request gets the decision of its command: the decision
// found already (a repeated command), or else, after send, the one
// announced (or found) within wait (context.DeadlineExceeded when none
// came). The subscription is made before the first look, so a decision
// made after it cannot be missed, and the next look is made only when
// notified (or at a poll).
func Decide[T any](ctx context.Context, l *Listener, channel, key string, wait time.Duration, a Announcement[T],
	send func(context.Context) error) (T, error) {
	return decide(ctx, l, channel, key, wait, true, a, send)
}

// DecideNew is Decide for a command whose id was never used before (made
// for this request): there is nothing to look up before sending, and the
// announcement carries the decision, so the database is read only when a
// notification came without it.
func DecideNew[T any](ctx context.Context, l *Listener, channel, key string, wait time.Duration, a Announcement[T],
	send func(context.Context) error) (T, error) {
	return decide(ctx, l, channel, key, wait, false, a, send)
}

func decide[T any](ctx context.Context, l *Listener, channel, key string, wait time.Duration, lookFirst bool,
	a Announcement[T], send func(context.Context) error) (T, error) {
	ch, cancel := l.Subscribe(channel, key)
	defer cancel()
	if lookFirst {
		// A look that fails is no answer, and no reason to give up: the
		// command is sent, and one decided before is announced again by
		// its decider when met once more (found by review: a moment's
		// database error failed the request without sending).
		if v, ok, err := a.Load(ctx); err == nil && ok {
			return v, nil
		}
	}
	if err := send(ctx); err != nil {
		var zero T
		return zero, err
	}
	return awaitOn(ctx, ch, wait, false, a)
}

// AwaitSubscribed is Await on a subscription the caller made before the
// awaited thing could happen (so nothing can have been missed): it looks
// only when woken, or at a poll.
func AwaitSubscribed[T any](ctx context.Context, ch <-chan string, wait time.Duration, a Announcement[T]) (T, error) {
	return awaitOn(ctx, ch, wait, false, a)
}

// awaitOn waits up to limit on a subscription already made for a value;
// checkFirst looks once before the first wake.
func awaitOn[T any](ctx context.Context, ch <-chan string, limit time.Duration, checkFirst bool, a Announcement[T]) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var out T
	err := wait.UntilValue(ctx, ch, SafetyPoll, checkFirst, func(ctx context.Context, value string, _ bool) (bool, error) {
		v, ok, err := a.read(ctx, value)
		out = v
		return ok, err
	})
	return out, err
}
