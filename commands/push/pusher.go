// Package push works the order push jobs: it sends the order decider the
// commands a job's step calls for, and calls the store platform.
package push

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/pgnotify"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/internal/wait"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Worker works the push jobs the order decider keeps (order.PushQueue).
// A push is one job that moves through its steps: start (send start_push,
// and once it is decided call the platform with no transaction open, send
// complete_push or fail_push), auto_retry (send auto_retry once its delay
// passed). The decider moves the job to its next step in the transaction
// that decides the command, so the worker only leases jobs and sends
// commands. A decided start leaves the job as it was, leased to the worker
// that makes the call, which keeps the lease renewed until the outcome is
// decided (leases); if that worker stops before, the lease runs out
// (within lease) and the next worker takes the call over: it sends
// start_push again, and the decider announces the decision it made. Every
// command id derives from the job's order, step and attempt, so a step
// worked twice (a lease that ran out, a crash) sends a command the decider
// already decided, and a call made twice uses the same idempotency key.
type Worker struct {
	Pool     *pgxpool.Pool
	Producer *kgo.Client
	Platform *Client
	// Shops tells the shop domain of each store (a store missing from the
	// answer does not exist).
	Shops  func(ctx context.Context, storeIDs []uuid.UUID) (map[uuid.UUID]string, error)
	Notify *pgnotify.Listener // channel jobs.Notify
	Log    *slog.Logger
	Calls  int            // platform calls at once, a quarter kept for stores with none under way (lanes); default DefaultCalls
	Naming schemas.Naming // topic names on the cluster
	// Drain is how long calls under way when the worker stops may go on,
	// their outcomes sent; those still running then are cut off, and
	// made again by the takeover. Default DrainGrace.
	Drain time.Duration

	leases *leases
}

const (
	// claimSize bounds the jobs leased at once.
	claimSize = 200
	// idlePoll is how often an idle worker looks for jobs that came due
	// by time (automatic retries); new work is announced.
	idlePoll = 500 * time.Millisecond
	// produceWait bounds the produce of a claim's commands.
	produceWait = 10 * time.Second
	// startWait is how long a worker waits for its start_push to be
	// decided (the lease kept meanwhile), as long as the three-minute
	// lease once gave: a decider that far behind is stuck rather than
	// slow. Later, the worker lets the lease end and the call goes to the
	// takeover, freeing its room for pushes the decider does decide.
	startWait = 2 * time.Minute
	// queueWindow is how soon a leased push's call should start: a worker
	// holds as many pushes as its calls start in that time, and a store as
	// many as its own calls do (lanes).
	queueWindow = 30 * time.Second
	// shedEvery is how often a worker whose room is full gives back the
	// pushes of stores whose calls turned slow (lanes.shed), and shedBack
	// how soon those come due again.
	shedEvery = time.Second
	shedBack  = 5 * time.Second
)

// DrainGrace is Worker.Drain's default: half the service's default 20 s
// shutdown timeout.
const DrainGrace = 10 * time.Second

type call struct {
	job    jobs.Job
	lease  *leased // kept by the worker's leases while the push is worked
	push   order.PushJob
	domain string
	known  bool // the store exists
}

// started is a call that waits for its start_push to be decided: wake is
// the decision's announcement, subscribed before the command was sent.
type started struct {
	call
	command uuid.UUID
	at      stream.Place // where the command went on the log
	wake    <-chan string
	stop    func()
}

// Run works jobs until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	if w.Calls <= 0 {
		w.Calls = DefaultCalls
	}
	if w.Drain <= 0 {
		w.Drain = DrainGrace
	}
	if w.leases == nil {
		w.leases = newLeases(w.Pool, w.Log)
	}
	renewing, stopRenewing := context.WithCancel(context.WithoutCancel(ctx))
	renewed := make(chan struct{})
	go func() { w.leases.run(renewing); close(renewed) }()
	// The leases are kept until every push handed out is over.
	defer func() { stopRenewing(); <-renewed }()
	// The pushes' leases end with drain: a call under way when ctx ends
	// goes on for w.Drain, and its outcome is sent, so a deploy does not
	// cut calls short to be made again by the takeover. Pushes not yet
	// called then are left to their next lease at once.
	drain, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()
	stopDrain := context.AfterFunc(ctx, func() {
		w.Log.Info("pusher stopping; calls under way may finish", "within", w.Drain)
		time.AfterFunc(w.Drain, cut)
	})
	defer stopDrain()
	wake, stop := w.Notify.Subscribe(jobs.Notify, order.PushQueue)
	defer stop()
	calls := newLanes(w.Calls)
	// Pushes leased and not yet done: starts waiting for their decision,
	// and calls.
	room := make(chan struct{}, claimSize+4*w.Calls)
	freed := make(chan struct{}, 1) // a push is done: room to claim again
	// release frees a push's place: in the lanes' count of its store and in
	// the room, in that order, so a claim never finds the room with a
	// place the lanes still count as held.
	release := func(store uuid.UUID) {
		calls.unhold(store)
		<-room
		select {
		case freed <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	for range w.Calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, ok := calls.next()
				if !ok {
					return
				}
				calls.done(c, w.call(ctx, c, func() { release(c.push.StoreID) }))
			}
		}()
	}
	var starts sync.WaitGroup // before the calls close: a start may still hand its call over
	defer func() {
		starts.Wait()
		queued := calls.takeQueued() // not started: given back, for the other workers
		held := make([]*leased, len(queued))
		for i, c := range queued {
			held[i] = c.lease
		}
		w.leases.giveBack(ctx, held, 0)
		for _, c := range queued {
			release(c.push.StoreID)
		}
		calls.close()
		wg.Wait()
	}()
	// shed lets go of the pushes of stores that hold more than their calls
	// start in time, and other stores' pushes are claimed meanwhile. They
	// come due again after shedBack, not when their leases would end: a
	// store judged slow on a few calls a stalled machine made slow had its
	// queue wait 40 s (pushes 45 s late at the end of a benchmark), and a
	// store that is slow has the pushes passed again by the next claim
	// (admit). Only a full room needs it (a claim passes what such stores
	// are due otherwise), so it runs on the ticker then, off the claims'
	// path.
	shed := func() {
		out := calls.shed(cap(room))
		if len(out) == 0 {
			return
		}
		held := make([]*leased, len(out))
		for i, c := range out {
			held[i] = c.lease
			release(c.push.StoreID)
		}
		// The statement runs off the claim loop, which a slow Postgres
		// (when stores turn slow) would hold up; the fences keep it right
		// whenever it lands.
		back := w.leases.letGo(held)
		go w.leases.returnJobs(ctx, back, shedBack)
	}
	shedding := time.NewTicker(shedEvery)
	defer shedding.Stop()
	bus := &order.Bus{Pool: w.Pool, Notify: w.Notify}
	passed := 0 // pushes the last claim passed
	for ctx.Err() == nil {
		_ = wait.Until(ctx, wake, idlePoll, true, func(ctx context.Context) (bool, error) {
			// While every leased call is still in flight, claim again as
			// soon as one is done: due calls wait on this worker, not on a
			// wake or the poll.
			free := calls.holding(cap(room)) - len(room)
			for free <= 0 {
				select {
				case <-freed:
				case <-shedding.C:
					shed()
				case <-ctx.Done():
					return false, ctx.Err()
				}
				free = calls.holding(cap(room)) - len(room)
			}
			// A claim reads as many due jobs as there is room for, and as
			// many more as the last one passed (pushes of stores that hold
			// what they may): a backlog of such pushes is passed up to a
			// claim's worth at a time, whatever the room, and few rows are
			// read (and locked) that the claim then leaves.
			got, err := w.claim(ctx, drain, calls, min(claimSize, free+passed), free, cap(room))
			if err != nil && ctx.Err() == nil {
				w.Log.Warn("claiming push jobs failed; retrying", "err", err)
			}
			passed = got.passed
			for _, st := range got.waiting {
				room <- struct{}{} // the claim took no more than the room left
				starts.Add(1)
				go func() {
					defer starts.Done()
					switch {
					case w.decided(ctx, bus, st):
						calls.put(st.call)
						return
					case ctx.Err() != nil: // stopping: the call is another worker's at once
						w.leases.giveBack(ctx, []*leased{st.lease}, 0)
					default:
						w.leases.end(st.lease)
					}
					release(st.push.StoreID)
				}()
			}
			for _, c := range got.now {
				room <- struct{}{}
				calls.put(c)
			}
			return err == nil && got.jobs > 0, err
		})
	}
}

// claimed is what one claim leased: jobs in all, passed of them (pushes
// of stores that hold what they may), the calls to make now, and those to
// make once their start_push is decided.
type claimed struct {
	jobs, passed int
	now          []call
	waiting      []started
}

// claim reads up to n due jobs and leases them, but for pushes past free
// (the worker holds room at most), which stay due. A push whose store
// holds what it may already (lanes.admit) is leased and passed: left
// unworked until the lease ends, out of the way of other stores' pushes.
// The commands of start and auto_retry steps go out before the lease
// commits (a crash leaves them due, to be sent again).
func (w *Worker) claim(ctx, drain context.Context, calls *lanes, n, free, room int) (got claimed, err error) {
	from := time.Now() // the lease lasts at least until from + lease
	tx, err := w.Pool.Begin(ctx)
	if err != nil {
		return claimed{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	work := map[uuid.UUID]call{} // the pushes admitted, forgotten unless the claim commits
	defer func() {
		if err != nil {
			for _, c := range work {
				calls.unhold(c.push.StoreID)
			}
			for _, st := range got.waiting {
				st.stop()
			}
			got = claimed{}
		}
	}()
	leased, err := jobs.Claim(ctx, tx, order.PushQueue, n, w.leases.term, func(j jobs.Job) bool {
		if j.Step != order.StepStart && j.Step != order.StepCall {
			return true // an automatic retry, or a step to report
		}
		c := newCall(j)
		switch {
		case len(work) >= free && !calls.over(c.push.StoreID, room):
			return false // for a claim with room for it
		case len(work) >= free || !calls.admit(c.push.StoreID, room):
			got.passed++
			return true
		}
		work[j.ID] = c
		return true
	})
	if err != nil || len(leased) == 0 {
		return claimed{}, err
	}
	got.jobs = len(leased)
	var recs, starts []*kgo.Record // starts: the start_push records, in got.waiting's order
	var stores []uuid.UUID
	for _, j := range leased {
		c, worked := work[j.ID]
		c.job = j
		var cmd order.Command
		switch {
		case j.Step == order.StepAutoRetry:
			cmd = order.Command{Kind: order.KindAutoRetry, Attempt: j.Attempt}
		case !worked && (j.Step == order.StepStart || j.Step == order.StepCall):
			continue // passed
		case j.Step == order.StepCall:
			got.now = append(got.now, c)
			stores = append(stores, c.push.StoreID)
			continue
		case j.Step == order.StepStart:
			cmd = order.Command{Kind: order.KindStartPush, Attempt: j.Attempt}
		default:
			w.Log.Error("push job in an unknown step; leaving it", "order", j.ID, "step", j.Step)
			continue
		}
		cmd.ID, cmd.OrderID = order.JobCommandID(j.ID, cmd.Kind, j.Attempt), j.ID
		rec, err := order.Record(w.Naming, cmd)
		if err != nil {
			return got, err
		}
		recs = append(recs, rec)
		if cmd.Kind == order.KindStartPush {
			st := started{call: c, command: cmd.ID, at: stream.Place{Topic: rec.Topic}}
			starts = append(starts, rec)
			st.wake, st.stop = w.Notify.Subscribe(order.NotifyDecided, cmd.ID.String())
			got.waiting = append(got.waiting, st)
			stores = append(stores, c.push.StoreID)
		}
	}
	if len(stores) > 0 {
		sctx, cancel := context.WithTimeout(ctx, produceWait) // the claim's rows stay locked meanwhile
		shops, err := w.Shops(sctx, stores)
		cancel()
		if err != nil {
			return got, fmt.Errorf("shop domains: %w", err)
		}
		for i := range got.now {
			got.now[i].domain, got.now[i].known = shops[got.now[i].push.StoreID]
		}
		for i := range got.waiting {
			got.waiting[i].domain, got.waiting[i].known = shops[got.waiting[i].push.StoreID]
		}
	}
	if len(recs) > 0 {
		// The claim's transaction holds its job rows (which the decider
		// writes next) while the commands go out: bounded, so Kafka being
		// away does not hold them, and a snapshot, for longer.
		pctx, cancel := context.WithTimeout(ctx, produceWait)
		err := w.Producer.ProduceSync(pctx, recs...).FirstErr()
		cancel()
		if err != nil {
			return got, fmt.Errorf("send push commands: %w", err)
		}
		for i, rec := range starts { // in got.waiting's order
			got.waiting[i].at.Partition, got.waiting[i].at.Offset = rec.Partition, rec.Offset
		}
	}
	// Committed even when the worker stops meanwhile: a commit cut off by
	// ctx may have been made all the same, leasing jobs the worker then
	// forgets, unworked until their leases end.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), produceWait)
	err = tx.Commit(cctx)
	cancel()
	if err != nil {
		return got, err
	}
	for i := range got.now {
		got.now[i].lease = w.leases.hold(drain, got.now[i].job, from)
	}
	for i := range got.waiting {
		got.waiting[i].lease = w.leases.hold(drain, got.waiting[i].job, from)
	}
	return got, nil
}

// newCall is the call of job j, whose payload says what to push.
func newCall(j jobs.Job) call {
	c := call{job: j}
	if err := codec.Unmarshal(j.Payload, &c.push); err != nil {
		// Not a payload this worker can push: the order fails, with why.
		c.push.Order.OrderID = j.ID
	}
	return c
}

// decided waits for st's start_push to be decided and reports whether the
// order is PROCESSING in its attempt, the call this worker's to make. A
// refusal (the order was cancelled first) leaves nothing to do. It waits
// up to startWait, while the push's lease is kept; a decision later than
// that leaves the call to the takeover when the lease ends.
func (w *Worker) decided(run context.Context, bus *order.Bus, st started) bool {
	defer st.stop()
	// Until the lease is lost, or the worker stops: a call not made yet
	// is not started then.
	ctx, cancel := context.WithCancel(st.lease.ctx)
	defer cancel()
	defer context.AfterFunc(run, cancel)()
	d, err := bus.AwaitSent(ctx, st.wake, st.command, st.at, startWait)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			w.Log.Warn("start of a push not decided in time; its call is taken over later", "order", st.job.ID, "err", err)
		}
		return false
	case !d.Accepted() || d.Status != schemas.StatusProcessing:
		return false
	case d.Current > d.Version:
		// A start sent again by a takeover is announced with its first
		// decision, which later ones may have overtaken: the attempt's
		// outcome (sent by the worker before, ahead of this start on the
		// order's partition) and whatever followed it, a cancel say. The
		// call is no longer this attempt's to make.
		w.Log.Info("a taken-over push whose attempt ended meanwhile; no call", "order", st.job.ID,
			"attempt", st.job.Attempt, "started_version", d.Version, "version", d.Current)
		return false
	}
	return true
}

// call pushes one order to the platform (the client retries transient
// errors) and sends the decider the outcome, without waiting for the
// broker: done runs once the outcome is acknowledged or failed, so the
// caller makes its next call meanwhile. The push's lease is kept until
// the outcome is decided (outcomeWait at most). When the outcome cannot be
// sent (shutting down, Kafka away), or the lease could not be kept, the
// lease runs out and the call is made again, under the same idempotency
// key. It returns how long the platform call took (0 when none was made,
// or it was cut off), for the lanes to time the store's calls.
func (w *Worker) call(ctx context.Context, c call, done func()) (took time.Duration) {
	j := c.job
	held := c.lease.ctx
	end := func() { w.leases.end(c.lease); done() }
	switch {
	case ctx.Err() != nil:
		// Stopping: a call not started is given back, for another worker
		// at once.
		w.leases.giveBack(ctx, []*leased{c.lease}, 0)
		done()
		return
	case held.Err() != nil:
		w.Log.Warn("a push's lease was lost before its call; left to the job's next lease", "order", j.ID)
		end()
		return
	}
	cmd := order.Command{OrderID: j.ID, Attempt: j.Attempt}
	switch {
	case c.push.IdempotencyKey == uuid.Nil:
		cmd.Kind, cmd.Error = order.KindFailPush, "the order's push content is unreadable"
	case !c.known:
		cmd.Kind, cmd.Error = order.KindFailPush, "store not found"
	default:
		began := time.Now()
		res, err := w.Platform.CreateOrder(held, c.domain, c.push.IdempotencyKey, c.push.Order)
		if held.Err() != nil {
			end() // shutting down, or the lease could not be kept: the call is the next lease's
			return 0
		}
		took = time.Since(began)
		if err != nil {
			msg := err.Error()
			if len(msg) > maxMessageBytes {
				msg = cut(msg, maxMessageBytes) + "…"
			}
			cmd.Kind, cmd.Error = order.KindFailPush, msg
		} else {
			cmd.Kind, cmd.PlatformOrderID, cmd.PlatformOrderNumber = order.KindCompletePush, res.PlatformOrderID, res.PlatformOrderNumber
		}
	}
	cmd.ID = order.JobCommandID(j.ID, cmd.Kind, j.Attempt)
	rec, err := order.Record(w.Naming, cmd)
	if err != nil {
		w.Log.Error("push outcome not encodable; the job is worked again when its lease ends", "order", j.ID, "err", err)
		end()
		return
	}
	// The lease is kept until the outcome is decided (announced): a
	// takeover before then, the decider being behind, would call again.
	decided, unsubscribe := w.Notify.Subscribe(order.NotifyDecided, cmd.ID.String())
	// Sent after ctx ended too: a call that finished while the worker
	// drains has its outcome recorded (the service flushes its producer
	// before it closes it). Not bound to the drain, which ends when Run
	// returns, before the record is acknowledged.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), produceWait)
	w.Producer.Produce(pctx, rec, func(_ *kgo.Record, err error) {
		cancel()
		if err != nil {
			unsubscribe()
			if ctx.Err() == nil {
				w.Log.Warn("sending a push outcome failed; the job is worked again when its lease ends", "order", j.ID, "err", err)
			}
			end()
			return
		}
		done()
		go func() {
			defer unsubscribe()
			w.awaitOutcome(held, decided, cmd.ID, outcomeWait)
			w.leases.end(c.lease)
		}()
	})
	return took
}

// awaitOutcome reports whether the outcome command id, sent after decided
// was subscribed, is decided within limit: announced with its decision, or
// found on a wake without one (the listener connected again, or the
// decider met the command again). A wake is not the decision. It ends
// false when held does (the decider moved the job on, or shutting down).
// No poll: past limit the push's lease ends by itself.
func (w *Worker) awaitOutcome(held context.Context, decided <-chan string, id uuid.UUID, limit time.Duration) bool {
	ctx, cancel := context.WithTimeout(held, limit)
	defer cancel()
	return wait.UntilValue(ctx, decided, limit, false, func(ctx context.Context, v string, _ bool) (bool, error) {
		if v != "" {
			return true, nil
		}
		_, found, err := order.LoadDecision(ctx, w.Pool, id)
		return found, err
	}) == nil
}
