package push

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// How lanes judge a store's calls.
const (
	// timedCalls is how many of the last calls a call time is the median
	// of: one call that hangs among many that do not changes nothing.
	timedCalls = 16
	// slowCall is how long a store's calls take at least, and four times
	// every store's at least, for the store to count as slow.
	slowCall = time.Second
	// stalled is how long a store none of whose calls has ended, while one
	// is under way, counts as slow, and its calls as taking that long at
	// least: past the platform client's attempt timeout, so a brief stall
	// of a fast store changes nothing.
	stalled = DefaultTimeout
	// storeMemory is how long lanes remember a store that holds nothing.
	storeMemory = 10 * time.Minute
)

// lanes hands a worker's calls to its callers, oldest first, and shares
// what the worker holds among stores, so that a store whose calls hang
// (a shop that never answers, one the platform throttles) holds up no
// other store's pushes:
//   - a store with a call under way starts another only while reserve
//     callers stay idle after it;
//   - slow stores (their calls take over slowCall and four times every
//     store's, or none has ended for stalled) have at most a quarter of
//     the callers under way between them, and never the reserve: the
//     others are for stores whose calls end;
//   - a slow store holds no more pushes than a quarter of the callers can
//     start within queueWindow at its call time: the claim leases the rest
//     of its due pushes without working them (admit), to come due again
//     when that lease ends, and gives back those it holds beyond that once
//     its calls turn slow (shed; due again shedBack later), so the worker
//     claims other stores' pushes instead. Other stores share what the
//     worker holds (holding).
//
// A store's call time is the median of its last timedCalls calls (every
// store's until one of its own has ended), or, when none of its calls has
// ended for stalled while one is under way, that long.
type lanes struct {
	mu      sync.Mutex
	changed *sync.Cond
	queue   []call
	stores  map[uuid.UUID]*storeLane
	active  map[uuid.UUID]*storeLane // the stores with calls under way
	times   callTimes                // every store's calls
	avg     time.Duration            // every store's calls: a moving average, an eighth of the way to each
	callers int
	idle    int // callers not at work
	reserve int
	closed  bool
	now     func() time.Time
}

// storeLane is what lanes keep of one store.
type storeLane struct {
	held  int // pushes the worker holds: admitted and neither done, forgotten nor shed
	busy  int // calls under way
	times callTimes
	// moved is when a call of the store last ended, or started with none
	// under way: how long it has not moved is a call time at least.
	moved time.Time
	seen  time.Time // last admitted or ended
}

// newLanes shares callers callers (a quarter of them kept in reserve).
func newLanes(callers int) *lanes {
	l := &lanes{stores: map[uuid.UUID]*storeLane{}, active: map[uuid.UUID]*storeLane{},
		callers: callers, idle: callers, reserve: callers / 4, now: time.Now}
	l.changed = sync.NewCond(&l.mu)
	return l
}

// store is the lane of store id, made on first use; l.mu is held.
func (l *lanes) store(id uuid.UUID) *storeLane {
	st := l.stores[id]
	if st == nil {
		st = &storeLane{}
		l.stores[id] = st
	}
	return st
}

// holding is how many pushes the worker holds at most, of room: as many
// as its calls can start within queueWindow at the moving average of
// every store's call times (which slow calls pull up, where the median
// that judges a store leaves them out: the worker then holds fewer
// pushes, which measured cheaper under load), and at least one per
// caller. A slow platform so leaves the rest of the
// queue PENDING (cancellable, and for other workers) instead of moving
// orders to PROCESSING whose calls would wait long.
func (l *lanes) holding(room int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return startable(l.callers, l.avg, room)
}

// startable is how many calls callers start within queueWindow at
// callTime each, at least callers and at most room (room when callTime is
// not known).
func startable(callers int, callTime time.Duration, room int) int {
	if callTime <= 0 {
		return room
	}
	return max(callers, min(room, int(int64(callers)*int64(queueWindow)/int64(callTime))))
}

// bound is how many pushes store st may hold, of room: what a quarter of
// the callers start within queueWindow at its call time if it is slow;
// l.mu is held. A store that is not slow has no bound of its own, only the
// worker's (holding), which a claim keeps to by the places left in its
// room. Bounding it by the room again would count the same pushes twice,
// by counts that do not move together: a call's place is freed when its
// outcome is acknowledged, which may be before its caller tells the lanes
// it is done (done), and a claim made in between found the store full and
// leased its due pushes unworked, until their lease ended 40 s later.
func (l *lanes) bound(st *storeLane, room int, now time.Time) int {
	if !l.slow(st, now) {
		return math.MaxInt
	}
	took := st.times.median
	if took <= 0 {
		took = l.times.median
	}
	if st.busy > 0 {
		took = max(took, now.Sub(st.moved))
	}
	return startable(max(1, l.callers/4), took, room)
}

// slow reports whether st's calls are slow: they take over slowCall and
// four times every store's, or none has ended for stalled while one is
// under way; l.mu is held.
func (l *lanes) slow(st *storeLane, now time.Time) bool {
	return st.times.median > max(slowCall, 4*l.times.median) || st.busy > 0 && now.Sub(st.moved) > stalled
}

// slowBusy is how many calls of slow stores are under way; l.mu is held.
func (l *lanes) slowBusy(now time.Time) int {
	n := 0
	for _, st := range l.active {
		if l.slow(st, now) {
			n += st.busy
		}
	}
	return n
}

// admit reports whether the worker, holding room pushes at most, may hold
// one more of store id, and counts it held if so, until unhold.
func (l *lanes) admit(id uuid.UUID, room int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	st := l.store(id)
	if st.held >= l.bound(st, room, now) {
		return false
	}
	st.held++
	st.seen = now
	return true
}

// over reports whether store id holds what it may of room already.
func (l *lanes) over(id uuid.UUID, room int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stores[id]
	return st != nil && st.held >= l.bound(st, room, l.now())
}

// unhold ends a push of store id admitted: its call made, given up before
// it, shed or taken back from the queue (the worker frees its place in the
// room right after), or its claim failed.
func (l *lanes) unhold(id uuid.UUID) {
	l.mu.Lock()
	l.store(id).held--
	l.mu.Unlock()
}

// put queues c, admitted, for the next caller it may go to.
func (l *lanes) put(c call) {
	l.mu.Lock()
	l.queue = append(l.queue, c)
	l.mu.Unlock()
	l.changed.Broadcast()
}

// next is the call a caller makes next: the oldest queued whose store may
// start one. It waits for one; false once the lanes are closed and empty.
// The caller calls done when the call is over.
func (l *lanes) next() (call, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		now := l.now()
		for i, c := range l.queue {
			st := l.store(c.push.StoreID)
			if slow := l.slow(st, now); slow && (l.idle <= l.reserve || l.slowBusy(now) >= max(1, l.callers/4)) ||
				!slow && l.idle <= l.reserve && st.busy > 0 {
				continue
			}
			l.queue = slices.Delete(l.queue, i, i+1)
			if st.busy == 0 {
				st.moved = now
				l.active[c.push.StoreID] = st
			}
			st.busy++
			l.idle--
			return c, true
		}
		if l.closed && len(l.queue) == 0 {
			return call{}, false
		}
		l.changed.Wait()
	}
}

// done ends a call next handed out, whose platform call took took (0:
// none was made, and nothing is timed).
func (l *lanes) done(c call, took time.Duration) {
	l.mu.Lock()
	now := l.now()
	st := l.store(c.push.StoreID)
	if st.busy--; st.busy == 0 {
		delete(l.active, c.push.StoreID)
	}
	st.moved, st.seen = now, now
	if took > 0 {
		st.times.add(took)
		l.times.add(took)
		if l.avg <= 0 {
			l.avg = took
		}
		l.avg += (took - l.avg) / 8
	}
	l.idle++
	l.mu.Unlock()
	l.changed.Broadcast()
}

// shed takes out of the queue, newest first, the calls of each store that
// holds more than it may of room, and forgets stores that hold nothing and
// were not seen for storeMemory. The caller lets go of the calls shed
// (unhold).
func (l *lanes) shed(room int) []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var out []call
	over := map[uuid.UUID]int{} // what each store queued holds beyond its bound, less what was shed
	for i := len(l.queue) - 1; i >= 0; i-- {
		c := l.queue[i]
		n, seen := over[c.push.StoreID]
		if !seen {
			st := l.store(c.push.StoreID)
			n = st.held - l.bound(st, room, now)
		}
		if n > 0 {
			l.queue = slices.Delete(l.queue, i, i+1)
			out = append(out, c)
			n--
		}
		over[c.push.StoreID] = n
	}
	for id, st := range l.stores {
		if st.held <= 0 && st.busy == 0 && now.Sub(st.seen) > storeMemory {
			delete(l.stores, id)
		}
	}
	return out
}

// close lets the callers end once the queue is empty.
func (l *lanes) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.changed.Broadcast()
}

// takeQueued takes the calls still queued out and returns them, for the
// caller to let go (unhold): a stopping worker starts none of them.
func (l *lanes) takeQueued() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	queued := l.queue
	l.queue = nil
	return queued
}

// callTimes keeps the last timedCalls call times and their median.
type callTimes struct {
	last   [timedCalls]time.Duration
	n      int // calls timed, up to timedCalls
	next   int // where the next time goes
	median time.Duration
}

func (t *callTimes) add(took time.Duration) {
	t.last[t.next] = took
	t.next = (t.next + 1) % timedCalls
	t.n = min(t.n+1, timedCalls)
	sorted := t.last
	slices.Sort(sorted[:t.n])
	t.median = sorted[t.n/2]
}
