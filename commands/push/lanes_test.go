package push

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/jobs"
)

func callOf(store uuid.UUID) call {
	c := call{job: jobs.Job{ID: uuid.New()}}
	c.push.StoreID = store
	return c
}

// callers runs n callers on l; each reports the store of a call as it
// starts it, and a call of a store in hang waits until release closes.
func callers(l *lanes, n int, hang map[uuid.UUID]bool, release <-chan struct{}) (started <-chan uuid.UUID, wait func()) {
	out := make(chan uuid.UUID, 100)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, ok := l.next()
				if !ok {
					return
				}
				out <- c.push.StoreID
				if hang[c.push.StoreID] {
					<-release
				}
				l.done(c)
			}
		}()
	}
	return out, wg.Wait
}

// startedBy waits (10 s at most) for the next call to start and returns
// its store.
func startedBy(t *testing.T, started <-chan uuid.UUID) uuid.UUID {
	t.Helper()
	select {
	case s := <-started:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no call started within 10 s")
		return uuid.Nil
	}
}

func TestAStoreWhoseCallsHangLeavesTheReserveToOtherStores(t *testing.T) {
	l := newLanes(4) // one in reserve
	slow, fast := uuid.New(), uuid.New()
	for range 10 {
		l.put(callOf(slow))
	}
	release := make(chan struct{})
	started, wait := callers(l, 4, map[uuid.UUID]bool{slow: true}, release)
	for i := range 3 {
		if s := startedBy(t, started); s != slow {
			t.Fatalf("call %d started for store %s, want the slow store", i, s)
		}
	}
	l.put(callOf(fast))
	if s := startedBy(t, started); s != fast {
		t.Fatalf("the next call started for store %s, want the other store's, while the slow store holds 3 of 4 callers", s)
	}
	select {
	case s := <-started:
		if s == slow {
			t.Fatal("the slow store took the caller kept in reserve")
		}
	default:
	}
	close(release)
	l.close()
	wait()
	if n := len(started) + 4; n != 11 {
		t.Fatalf("%d calls made, want all 11 once the slow store answers", n)
	}
}

func TestALoneCallerTakesEveryStoresCalls(t *testing.T) {
	l := newLanes(1) // nothing in reserve
	store := uuid.New()
	for range 3 {
		l.put(callOf(store))
	}
	l.close()
	started, wait := callers(l, 1, nil, nil)
	wait()
	if n := len(started); n != 3 {
		t.Fatalf("%d calls made, want 3", n)
	}
}
