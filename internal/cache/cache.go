// Package cache keeps answers of the read side in memory for the request
// path (a token's account, a variant's price), so a request does not read
// Postgres for what rarely changes. Whatever changes a cached answer
// announces it on Notify (key: the cache's name) when its transaction
// commits, and every instance drops that cache at once; so does a
// reconnect of the listener, which may have missed an announcement. An
// entry also expires after the cache's TTL, which bounds the life of a
// change made behind the service's back (a hand-written UPDATE).
//
// A load that began before a drop never stores its answer: it may have
// read the data as it was before the change.
package cache

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/pgnotify"
)

// Notify is the Postgres channel on which changes are announced (payload:
// the name of the cache to drop).
const Notify = "cache_drop"

// Cache maps keys to values, each kept for TTL.
type Cache[K comparable, V any] struct {
	Name string // its key on Notify
	TTL  time.Duration

	mu      sync.Mutex
	gen     uint64 // counts drops
	entries map[K]entry[V]
}

type entry[V any] struct {
	v       V
	expires time.Time
}

// Get returns the value of k when it is cached and fresh.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || time.Now().After(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// Gen is to be taken before a load whose answers go to Put.
func (c *Cache[K, V]) Gen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Put stores v for k unless the cache was dropped since gen was taken.
func (c *Cache[K, V]) Put(gen uint64, k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.entries == nil {
		c.entries = map[K]entry[V]{}
	}
	c.entries[k] = entry[V]{v: v, expires: time.Now().Add(c.TTL)}
}

// Load returns k's value from the cache, else from load, whose answer is
// kept unless the cache was dropped while it ran.
func (c *Cache[K, V]) Load(k K, load func() (V, error)) (V, error) {
	if v, ok := c.Get(k); ok {
		return v, nil
	}
	gen := c.Gen()
	v, err := load()
	if err == nil {
		c.Put(gen, k, v)
	}
	return v, err
}

// LoadMany returns the values of keys: the cached ones, and what load
// returns for the others (a key load leaves out has no value, and nothing
// is kept for it), kept as Load keeps them.
func (c *Cache[K, V]) LoadMany(keys []K, load func(missing []K) (map[K]V, error)) (map[K]V, error) {
	out := make(map[K]V, len(keys))
	var missing []K
	for _, k := range keys {
		if v, ok := c.Get(k); ok {
			out[k] = v
		} else if !slices.Contains(missing, k) {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	gen := c.Gen()
	found, err := load(missing)
	if err != nil {
		return nil, err
	}
	for k, v := range found {
		out[k] = v
		c.Put(gen, k, v)
	}
	return out, nil
}

// Drop forgets every entry.
func (c *Cache[K, V]) Drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.entries)
}

// Follow drops the cache on each announcement of its name and on each
// reconnect of l, until ctx ends. The subscription is in place when Follow
// returns; the dropping goes on in a goroutine.
func (c *Cache[K, V]) Follow(ctx context.Context, l *pgnotify.Listener) {
	wake, stop := l.Subscribe(Notify, c.Name)
	go func() {
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
				c.Drop()
			}
		}
	}()
}

// QueueAnnounce queues on b the announcement that the caches named change
// when b's transaction commits.
func QueueAnnounce(b *pgx.Batch, names ...string) {
	b.Queue(`SELECT pg_notify($1, n) FROM unnest($2::text[]) AS n`, Notify, names)
}
