package push

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/pgtest"
)

// room is what the worker of these tests holds at most: claimSize and
// four pushes per caller, for 16 callers.
const room = 264

// queueCall admits a call of store on l and queues it.
func queueCall(t *testing.T, l *lanes, store uuid.UUID) call {
	t.Helper()
	c := call{job: jobs.Job{ID: uuid.New()}}
	c.push.StoreID = store
	if !l.admit(store, room) {
		t.Fatalf("a call of store %s was not admitted", store)
	}
	l.put(c)
	return c
}

// testLanes are lanes of callers on a clock the test moves.
func testLanes(callers int) (*lanes, *time.Time) {
	l := newLanes(callers)
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	return l, &now
}

// timeCalls makes calls of store one after the other on l, each taking
// its time on l's clock (now).
func timeCalls(t *testing.T, l *lanes, now *time.Time, store uuid.UUID, took ...time.Duration) {
	t.Helper()
	for _, d := range took {
		queueCall(t, l, store)
		c, _ := l.next()
		*now = now.Add(d)
		l.done(c, d)
		l.unhold(store) // the worker frees its place
	}
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
				l.done(c, 0)
				l.unhold(c.push.StoreID)
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
		queueCall(t, l, slow)
	}
	release := make(chan struct{})
	started, wait := callers(l, 4, map[uuid.UUID]bool{slow: true}, release)
	for i := range 3 {
		if s := startedBy(t, started); s != slow {
			t.Fatalf("call %d started for store %s, want the slow store", i, s)
		}
	}
	queueCall(t, l, fast)
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
		queueCall(t, l, store)
	}
	l.close()
	started, wait := callers(l, 1, nil, nil)
	wait()
	if n := len(started); n != 3 {
		t.Fatalf("%d calls made, want 3", n)
	}
}

func TestAWorkerHoldsOnlyThePushesItsCallsCanStartInTime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		calls []time.Duration // the platform calls made so far
		want  int
	}{
		{"before any call the worker fills its room", nil, room},
		{"at 2 ms a call the room is the bound", []time.Duration{2 * time.Millisecond}, room},
		{"at 5 s a call, 16 calls start 96 pushes in 30 s", []time.Duration{5 * time.Second}, 96},
		{"at 10 minutes a call it holds one push per call", []time.Duration{10 * time.Minute}, 16},
		{"the average moves an eighth of the way to each call", []time.Duration{5 * time.Second, 13 * time.Second}, 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, now := testLanes(16)
			timeCalls(t, l, now, uuid.New(), tc.calls...)
			if got := l.holding(room); got != tc.want {
				t.Errorf("holds %d pushes, want %d", got, tc.want)
			}
		})
	}
}

func TestAStoreHoldsWhatItsCallsStartInTheWindow(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		store   []time.Duration // the store's calls made so far
		others  []time.Duration // another store's
		running time.Duration   // how long a call of the store has been under way, if one is
		idle    time.Duration   // how long after its calls, with none under way, it is judged
		want    int             // pushes the store holds of the room, its call under way included
	}{
		{"a store of a worker no call has timed yet may fill the room", nil, nil, 0, 0, room},
		{"a store whose calls take 5 s, as every store's do, is not slow: the worker's bound is its own",
			[]time.Duration{5 * time.Second}, nil, 0, 0, room},
		{"a store none of whose calls has ended is not slow", nil, []time.Duration{5 * time.Second}, 0, 0, room},
		{"a store whose calls take 5 s while others' take 1 ms is slow: a quarter of the callers start 24 in 30 s",
			[]time.Duration{5 * time.Second}, []time.Duration{ms, ms, ms}, 0, 0, 24},
		{"one call that hangs among fast ones changes nothing",
			append(slices.Repeat([]time.Duration{10 * ms}, 15), 40*time.Second), nil, 0, 0, room},
		{"a fast store none of whose calls has ended for 5 s is judged by its calls",
			[]time.Duration{10 * ms}, nil, 5 * time.Second, 0, room},
		{"a store none of whose calls has ended for 20 s is slow: a quarter of the callers start 6 in 30 s",
			[]time.Duration{10 * ms}, nil, 20 * time.Second, 0, 6},
		{"a store whose calls hang holds what a quarter of the callers work at once", nil, nil, 10 * time.Minute, 0, 4},
		{"a slow store whose last call ended an hour ago is judged by its calls",
			[]time.Duration{5 * time.Second}, []time.Duration{ms, ms, ms}, 0, time.Hour, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, now := testLanes(16)
			store := uuid.New()
			timeCalls(t, l, now, uuid.New(), tc.others...)
			timeCalls(t, l, now, store, tc.store...)
			*now = now.Add(tc.idle)
			if tc.running > 0 {
				queueCall(t, l, store)
				l.next()
				*now = now.Add(tc.running)
			}
			// Filled up to the worker's room, which the claim keeps to:
			// only a slow store is refused before.
			held := func() int {
				if st := l.stores[store]; st != nil {
					return st.held
				}
				return 0
			}
			for held() < room && l.admit(store, room) {
			}
			if got := held(); got != tc.want {
				t.Errorf("the store holds %d pushes, want %d", got, tc.want)
			}
		})
	}
}

func TestAStoreWhoseCallsTurnSlowGivesBackWhatItCannotStartInTime(t *testing.T) {
	l, now := testLanes(16)
	slow, fast := uuid.New(), uuid.New()
	var queued []call
	for range 100 {
		queued = append(queued, queueCall(t, l, slow))
	}
	queueCall(t, l, fast)
	for range 12 {
		if c, _ := l.next(); c.push.StoreID != slow {
			t.Fatal("a call of the fast store started before the slow store's")
		}
	}
	*now = now.Add(time.Second)
	if shed := l.shed(room); len(shed) != 0 {
		t.Fatalf("%d calls given back while the slow store's calls had been under way for 1 s", len(shed))
	}
	*now = now.Add(time.Minute)
	shed := l.shed(room)
	if len(shed) != 88 {
		t.Fatalf("%d calls given back after a minute with none ended, want the slow store's 88 not under way", len(shed))
	}
	for i, c := range shed {
		if want := queued[len(queued)-1-i].job.ID; c.job.ID != want {
			t.Fatalf("call %d given back is not the slow store's %d-th newest", i, i)
		}
		l.unhold(c.push.StoreID) // the worker lets it go
	}
	if held := l.stores[slow].held; held != 12 {
		t.Fatalf("the slow store holds %d pushes, want the 12 under way", held)
	}
	if c, _ := l.next(); c.push.StoreID != fast {
		t.Fatal("the fast store's call is not the next to start")
	}
	if l.admit(slow, room) {
		t.Fatal("the slow store was admitted another push")
	}
}

func TestASlowStoreWaitsForACallerOutsideTheReserve(t *testing.T) {
	l, now := testLanes(4) // one in reserve
	slow, fast, hog := uuid.New(), uuid.New(), uuid.New()
	timeCalls(t, l, now, fast, 10*time.Millisecond, 10*time.Millisecond, 10*time.Millisecond)
	timeCalls(t, l, now, slow, 30*time.Second)
	for range 3 {
		queueCall(t, l, hog)
		l.next()
	}
	queueCall(t, l, slow)
	queueCall(t, l, fast)
	if c, _ := l.next(); c.push.StoreID != fast {
		t.Fatal("the reserve caller went to the store whose calls take 30 s, not the one whose take 10 ms")
	}
}

func TestSlowStoresTogetherTakeAQuarterOfTheCallers(t *testing.T) {
	l, now := testLanes(16)
	hangs, other, fast := uuid.New(), uuid.New(), uuid.New()
	for _, s := range []uuid.UUID{hangs, hangs, hangs, other} {
		queueCall(t, l, s)
		l.next()
	}
	*now = now.Add(time.Minute) // none of their calls has ended since
	queueCall(t, l, other)
	queueCall(t, l, hangs)
	for range 10 {
		queueCall(t, l, fast)
	}
	for i := range 8 {
		if c, _ := l.next(); c.push.StoreID != fast {
			t.Fatalf("call %d went to a store whose calls hang, while four such calls are under way", i)
		}
	}
}

// TestAClaimPassesTheBacklogOfAStoreThatHoldsWhatItMay: of the due pushes
// a claim reads, those of a store whose calls hang and that holds what it
// may are leased and passed (out of the way, unworked), a push of another
// store is taken while there is room, and one past the room stays due for
// the next claim.
func TestAClaimPassesTheBacklogOfAStoreThatHoldsWhatItMay(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	l, now := testLanes(16)
	hangs, other := uuid.New(), uuid.New()
	for range 12 { // the store's calls under way, for ten minutes
		queueCall(t, l, hangs)
		l.next()
	}
	*now = now.Add(10 * time.Minute)

	due := time.Now().Add(-time.Minute)
	w := jobs.NewWrites(order.PushQueue)
	push := func(store uuid.UUID) uuid.UUID {
		id := uuid.New()
		payload, err := codec.Marshal(order.PushJob{StoreID: store, IdempotencyKey: uuid.New()})
		if err != nil {
			t.Fatal(err)
		}
		due = due.Add(time.Millisecond)
		w.Put(jobs.Job{ID: id, Step: order.StepCall, Attempt: 1, DueAt: due, Payload: payload})
		return id
	}
	for range 5 {
		push(hangs)
	}
	taken, left := push(other), push(other)
	queue(t, pool, w)

	worker := &Worker{Pool: pool, Log: slog.New(slog.DiscardHandler), leases: newLeases(pool, slog.New(slog.DiscardHandler)),
		Shops: func(_ context.Context, ids []uuid.UUID) (map[uuid.UUID]string, error) {
			return map[uuid.UUID]string{other: "other.example"}, nil
		}}
	got, err := worker.claim(ctx, ctx, l, 10, 1, room)
	if err != nil {
		t.Fatal(err)
	}
	if got.jobs != 6 || got.passed != 5 || len(got.now) != 1 || got.now[0].job.ID != taken || got.now[0].domain != "other.example" {
		t.Fatalf("the claim leased %d jobs, passed %d, and takes %d calls; want 6 leased, the hanging store's 5 passed, "+
			"and the other store's first taken", got.jobs, got.passed, len(got.now))
	}
	if got := claimPushes(t, pool, lease); len(got) != 1 || got[0].ID != left {
		t.Fatalf("the next claim took %d jobs, want the other store's push past the room", len(got))
	}
}

// TestAClaimRightAfterACallEndsWorksTheNextPush: a worker whose room is
// full frees a place when a call's outcome is acknowledged, which may come
// before the caller has told the lanes the call is done. The claim made at
// once, for that one place, sees the store (not slow) still holding the
// whole room: it must work the store's next push, not lease it unworked
// until the lease ends (40 s), and must leave its other due pushes due.
// Found by runs at 1,000/s whose last few pushes came 30-45 s late.
func TestAClaimRightAfterACallEndsWorksTheNextPush(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	l, _ := testLanes(16)
	store := uuid.New()
	for range room { // the room full, one call's outcome acknowledged
		queueCall(t, l, store)
	}

	due := time.Now().Add(-time.Minute)
	w := jobs.NewWrites(order.PushQueue)
	var ids []uuid.UUID
	for range 3 {
		payload, err := codec.Marshal(order.PushJob{StoreID: store, IdempotencyKey: uuid.New()})
		if err != nil {
			t.Fatal(err)
		}
		due = due.Add(time.Millisecond)
		id := uuid.New()
		w.Put(jobs.Job{ID: id, Step: order.StepCall, Attempt: 1, DueAt: due, Payload: payload})
		ids = append(ids, id)
	}
	queue(t, pool, w)

	worker := &Worker{Pool: pool, Log: slog.New(slog.DiscardHandler), leases: newLeases(pool, slog.New(slog.DiscardHandler)),
		Shops: func(_ context.Context, _ []uuid.UUID) (map[uuid.UUID]string, error) {
			return map[uuid.UUID]string{store: "store.example"}, nil
		}}
	got, err := worker.claim(ctx, ctx, l, 3, 1, room)
	if err != nil {
		t.Fatal(err)
	}
	if got.jobs != 1 || got.passed != 0 || len(got.now) != 1 || got.now[0].job.ID != ids[0] {
		t.Fatalf("the claim leased %d jobs, passed %d, and takes %d calls; want the first push leased and taken, none passed", got.jobs, got.passed, len(got.now))
	}
	if left := claimPushes(t, pool, lease); len(left) != 2 {
		t.Fatalf("%d pushes were still due after the claim, want the other 2", len(left))
	}
}

// TestAStoppingWorkerTakesBackTheQueuedCalls: a worker that stops lets go
// of the calls still queued at once; they are held no more, and no caller
// gets them.
func TestAStoppingWorkerTakesBackTheQueuedCalls(t *testing.T) {
	l := newLanes(4)
	store := uuid.New()
	for range 2 {
		if !l.admit(store, 10) {
			t.Fatal("a push was not admitted")
		}
		l.put(call{job: jobs.Job{ID: uuid.New()}, push: order.PushJob{StoreID: store}})
	}
	got := l.takeQueued()
	if len(got) != 2 {
		t.Fatalf("%d calls taken back, want the 2 queued", len(got))
	}
	for _, c := range got {
		l.unhold(c.push.StoreID) // the worker lets it go
	}
	l.close()
	if held := l.stores[store].held; held != 0 {
		t.Fatalf("the store still holds %d pushes", held)
	}
	if _, ok := l.next(); ok {
		t.Fatal("a caller got a call from closed lanes")
	}
}
