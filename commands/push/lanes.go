package push

import (
	"sync"

	"github.com/google/uuid"
)

// lanes hands a worker's calls to its callers, oldest first, and shares
// the callers among stores: a store with a call under way starts another
// only while reserve callers stay idle after it. A store whose calls hang
// (a shop that never answers, one the platform throttles) so holds at most
// all callers but the reserve, and the pushes of other stores the worker
// holds start on the reserve, not when the hanging calls end. What lanes
// cannot do: each store with no call under way may take a reserve caller,
// so as many hanging stores as the reserve use it up; and the worker holds
// the oldest due pushes, so one store's backlog that fills what it holds
// keeps the other stores' pushes in the queue until the backlog thins.
type lanes struct {
	mu      sync.Mutex
	changed *sync.Cond
	queue   []call
	busy    map[uuid.UUID]int // callers at work, by store
	idle    int               // callers not at work
	reserve int
	closed  bool
}

// newLanes shares callers callers (a quarter of them kept in reserve).
func newLanes(callers int) *lanes {
	l := &lanes{busy: map[uuid.UUID]int{}, idle: callers, reserve: callers / 4}
	l.changed = sync.NewCond(&l.mu)
	return l
}

// put queues c for the next caller it may go to.
func (l *lanes) put(c call) {
	l.mu.Lock()
	l.queue = append(l.queue, c)
	l.mu.Unlock()
	l.changed.Broadcast()
}

// next is the call a caller makes next: the oldest queued whose store may
// start one. It waits for one; false once the lanes are closed and empty.
// The caller calls done(c) when the call is over.
func (l *lanes) next() (call, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		for i, c := range l.queue {
			if s := c.push.StoreID; l.busy[s] == 0 || l.idle > l.reserve {
				l.queue = append(l.queue[:i], l.queue[i+1:]...)
				l.busy[s]++
				l.idle--
				return c, true
			}
		}
		if l.closed && len(l.queue) == 0 {
			return call{}, false
		}
		l.changed.Wait()
	}
}

// done ends a call next handed out.
func (l *lanes) done(c call) {
	l.mu.Lock()
	if l.busy[c.push.StoreID]--; l.busy[c.push.StoreID] == 0 {
		delete(l.busy, c.push.StoreID)
	}
	l.idle++
	l.mu.Unlock()
	l.changed.Broadcast()
}

// close lets the callers end once the queue is empty.
func (l *lanes) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.changed.Broadcast()
}
