package delivery

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/sethvargo/go-retry"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"
)

// The sender's consumer-group session: partitions taken and released,
// records parked until due, dispatched per endpoint, and offsets committed
// up to the first record not finished.

type tp struct {
	topic     string
	partition int32
}

// part is the sender's view of one owned partition.
type part struct {
	next        int64 // offset after the last record taken
	epoch       int32
	outstanding map[int64]struct{} // taken, not finished (parked, queued or in flight)
	inflight    int
	parked      []*kgo.Record // tier records not yet due, in order
	timer       *time.Timer
	paused      bool
	committed   int64
	revoked     bool
}

type job struct {
	tp     tp
	part   *part
	offset int64
	task   schemas.DeliveryTask
	rec    *kgo.Record // the record carrying task, for a dead letter
}

type endpoint struct {
	queue   []job
	running int           // workers (each with at most one request out)
	latency time.Duration // moving average of its attempts
	// Requests out now; since when one has been out (busy) and when the
	// last one ended: together they tell how long the endpoint has gone
	// without an answer (stall).
	inflight      int
	busy, lastEnd time.Time
	heard         bool // an attempt of it has ended (a request made or not)
}

// limit is how many requests the endpoint may have in flight: perEndpoint,
// or FastFactor times that while it answers within FastAnswer. A client
// with one endpoint taking thousands of events a second needs more than a
// handful in flight; an endpoint that answers slowly (or not at all, until
// the timeout) keeps to perEndpoint, so slow ones cannot take the shared
// slots from the others. Until its first attempt ends an endpoint has one
// request out: one that never answers holds one slot, not perEndpoint,
// before it is known to be slow.
func (e *endpoint) limit(perEndpoint int) int {
	switch {
	case !e.heard:
		return 1
	case e.latency > 0 && e.latency < FastAnswer:
		return MaxPerEndpoint(perEndpoint)
	}
	return perEndpoint
}

// MaxPerEndpoint is the most requests one endpoint may have in flight, for
// a sender configured with perEndpoint.
func MaxPerEndpoint(perEndpoint int) int { return perEndpoint * FastFactor }

// stall is how long the endpoint has had a request out with none ending.
func (e *endpoint) stall(now time.Time) time.Duration {
	if e.inflight == 0 {
		return 0
	}
	since := e.busy
	if e.lastEnd.After(since) {
		since = e.lastEnd
	}
	return now.Sub(since)
}

// pace is how long the endpoint takes per request: its answer time, or as
// long as it has gone without an answer, when that is longer (an endpoint
// that has never answered, or stopped answering, is judged before its
// requests time out).
func (e *endpoint) pace(now time.Time) time.Duration { return max(e.latency, e.stall(now)) }

// slow reports whether the endpoint takes SlowAnswer or more per request.
func (e *endpoint) slow(now time.Time) bool { return e.pace(now) >= SlowAnswer }

// bound is how many waiting tasks a slow endpoint holds: as many as it
// works within SlowDrain at its pace, and at least one per request it may
// have out. The rest are deferred.
func (e *endpoint) bound(perEndpoint int, now time.Time) int {
	limit := e.limit(perEndpoint)
	return max(limit, int(SlowDrain*time.Duration(limit)/e.pace(now)))
}

// backlogged reports whether the endpoint is slow and holds more waiting
// tasks than its bound.
func (e *endpoint) backlogged(perEndpoint int, now time.Time) bool {
	return e.slow(now) && len(e.queue) > e.bound(perEndpoint, now)
}

// drain is how long a slow endpoint would need for MaxQueuedPerEndpoint
// tasks at its pace, perEndpoint at a time: the time its deferred tasks
// wait for (DeferTier), long enough that they do not come back to be
// deferred again. An endpoint that has never answered is taken to answer
// at the attempt timeout.
func (e *endpoint) drain(perEndpoint int, timeout time.Duration, now time.Time) time.Duration {
	pace := e.pace(now)
	if e.latency == 0 {
		pace = max(pace, timeout)
	}
	return pace * MaxQueuedPerEndpoint / time.Duration(perEndpoint)
}

// DeferTier is the retry tier a deferred task goes to: the first whose
// wait is at least drain, else the last. Every record of a tier waits the
// same time, so each tier stays in due order.
func DeferTier(delays []time.Duration, drain time.Duration) int {
	for i, d := range delays {
		if d >= drain {
			return i
		}
	}
	return len(delays) - 1
}

// session is one group membership.
type session struct {
	s      *Sender
	cl     *kgo.Client
	ctx    context.Context
	mu     sync.Mutex
	parts  map[tp]*part
	ends   map[uuid.UUID]*endpoint
	buffer chan struct{} // one slot per record held
	reqs   chan struct{} // one slot per request in flight
	// One slot per request in flight to a slow endpoint: slow endpoints
	// together have at most half of reqs, so endpoints that do not answer
	// cannot take every request slot from those that do.
	slowReqs chan struct{}
	// One slot per attempt between its request and its recorded outcome:
	// when outcomes cannot be recorded (Kafka away), requests stop after
	// Concurrency of them instead of running on through the buffer.
	unrecorded chan struct{}
	wg         sync.WaitGroup
	closed     bool // polling ended: parked records stay parked
	// running holds the tasks being attempted: a copy of one (the same
	// task twice on the log) waits for it, then finds it done.
	running map[taskKey]chan struct{}
	// ended, while a release waits for requests in flight, is closed (and
	// cleared) when a job ends.
	ended chan struct{}
}

type taskKey struct {
	delivery     uuid.UUID
	run, attempt int
}

func (s *Sender) session(ctx context.Context) error {
	ss := &session{s: s, ctx: ctx, parts: map[tp]*part{}, ends: map[uuid.UUID]*endpoint{}, running: map[taskKey]chan struct{}{},
		buffer: make(chan struct{}, s.MaxBuffered), reqs: make(chan struct{}, s.Concurrency), slowReqs: make(chan struct{}, max(1, s.Concurrency/2)),
		unrecorded: make(chan struct{}, s.Concurrency)}
	opts := []kgo.Opt{
		kgo.SeedBrokers(s.Brokers...),
		kgo.ConsumerGroup(s.Naming.Group(SenderGroup)),
		kgo.ConsumeTopics(s.Topics()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(250 * time.Millisecond),
		kgo.OnPartitionsAssigned(ss.assigned),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) { ss.release(ctx, m, true) }),
		kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) { ss.release(ctx, m, false) }),
		// The group waits for a revoke's release, which waits for requests
		// out up to twice the timeout: past the rebalance timeout the
		// member would be expelled with its request still out, and the
		// partition handed over all the same.
		kgo.RebalanceTimeout(max(time.Minute, 2*s.Timeout+15*time.Second)),
	}
	if s.ClientOpts != nil {
		opts = append(opts, s.ClientOpts()...)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("delivery sender: %w", err)
	}
	ss.cl = cl
	done := make(chan struct{})
	go ss.commitLoop(done)
	err = ss.poll()
	close(done)
	ss.mu.Lock()
	ss.closed = true
	for _, st := range ss.parts {
		if st.timer != nil {
			st.timer.Stop()
		}
	}
	ss.mu.Unlock()
	// Let requests in flight finish (bounded by the attempt deadline), then
	// leave the group: the revoke callback commits what finished.
	ss.wg.Wait()
	cl.Close()
	return err
}

func (ss *session) assigned(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for t, ps := range m {
		for _, p := range ps {
			ss.parts[tp{t, p}] = &part{next: -1, committed: -1, outstanding: map[int64]struct{}{}}
		}
	}
}

// release gives up partitions: parked records are dropped (they are read
// again by the next owner), started requests are waited for, and when the
// partitions were revoked (not lost) what finished is committed.
func (ss *session) release(ctx context.Context, m map[string][]int32, commit bool) {
	var gone []tp
	ss.mu.Lock()
	for t, ps := range m {
		for _, p := range ps {
			k := tp{t, p}
			st := ss.parts[k]
			if st == nil {
				continue
			}
			st.revoked = true
			if st.timer != nil {
				st.timer.Stop()
			}
			ss.drop(st.parked)
			st.parked = nil
			gone = append(gone, k)
		}
	}
	ss.mu.Unlock()
	// A request may take its timeout twice (a reconnect's handshake may
	// take the whole timeout again, see Guard): handed over earlier, its
	// record would be sent again by the next owner while it runs.
	deadline := time.NewTimer(2*ss.s.Timeout + 5*time.Second)
	defer deadline.Stop()
wait:
	for {
		busy := 0
		ss.mu.Lock()
		for _, k := range gone {
			busy += ss.parts[k].inflight
		}
		if busy > 0 && ss.ended == nil {
			ss.ended = make(chan struct{})
		}
		ended := ss.ended
		ss.mu.Unlock()
		if busy == 0 {
			break
		}
		select {
		case <-ended:
		case <-deadline.C:
			break wait
		}
	}
	if commit {
		ss.mu.Lock()
		offs := ss.watermarks(gone)
		ss.mu.Unlock()
		if len(offs) > 0 {
			ss.commit(offs)
		}
	}
	ss.mu.Lock()
	resume := map[string][]int32{}
	for _, k := range gone {
		delete(ss.parts, k)
		resume[k.topic] = append(resume[k.topic], k.partition)
	}
	ss.mu.Unlock()
	ss.cl.ResumeFetchPartitions(resume)
}

// drop frees the buffer slots of records that will not be worked here.
func (ss *session) drop(recs []*kgo.Record) {
	for range recs {
		<-ss.buffer
	}
}

// watermark is the offset to commit for st: its first unfinished record, or
// after the last taken one. ok is false when there is nothing new.
func (ss *session) watermark(st *part) (kgo.EpochOffset, bool) {
	if st == nil || st.next < 0 {
		return kgo.EpochOffset{}, false
	}
	low := st.next
	for off := range st.outstanding {
		if off < low {
			low = off
		}
	}
	if low <= st.committed {
		return kgo.EpochOffset{}, false
	}
	return kgo.EpochOffset{Epoch: st.epoch, Offset: low}, true
}

// watermarks are the offsets to commit for keys; called with mu held.
func (ss *session) watermarks(keys []tp) map[string]map[int32]kgo.EpochOffset {
	offs := map[string]map[int32]kgo.EpochOffset{}
	for _, k := range keys {
		if off, ok := ss.watermark(ss.parts[k]); ok {
			if offs[k.topic] == nil {
				offs[k.topic] = map[int32]kgo.EpochOffset{}
			}
			offs[k.topic][k.partition] = off
		}
	}
	return offs
}

func (ss *session) commitLoop(done <-chan struct{}) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		ss.mu.Lock()
		ss.tend(time.Now())
		var live []tp
		for k, st := range ss.parts {
			if !st.revoked {
				live = append(live, k)
			}
		}
		offs := ss.watermarks(live)
		ss.mu.Unlock()
		if len(offs) == 0 {
			continue
		}
		ss.commit(offs)
	}
}

// commit commits offs.
func (ss *session) commit(offs map[string]map[int32]kgo.EpochOffset) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ss.cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			ss.s.Log.Warn("committing delivery offsets failed", "err", err)
			return
		}
		ss.mu.Lock()
		defer ss.mu.Unlock()
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					continue
				}
				if st := ss.parts[tp{t.Topic, p.Partition}]; st != nil {
					if off := offs[t.Topic][p.Partition].Offset; off > st.committed {
						st.committed = off
					}
				}
			}
		}
	})
}

func (ss *session) poll() error {
	log := ss.s.Log.With("consumer", SenderGroup)
	for {
		ss.s.Metrics.setBuffered(len(ss.buffer))
		fetches := ss.cl.PollRecords(ss.ctx, 500)
		if ss.ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		ss.s.Metrics.observePoll(fetches.NumRecords())
		failure := stream.FetchFailure(fetches, log)
		if errors.Is(failure, stream.ErrTopicMadeAgain) {
			return failure
		}
		if err := ss.cutBelowTaken(fetches); err != nil {
			return err
		}
		if failure != nil && fetches.NumRecords() == 0 {
			if !stream.AfterFetchFailure(ss.ctx) {
				return nil
			}
			continue
		}
		for _, r := range fetches.Records() {
			select {
			case ss.buffer <- struct{}{}:
			case <-ss.ctx.Done():
				return nil
			}
			ss.take(r)
		}
	}
}

// errCutBack ends a session whose client found a log cut back below what
// the session took from it.
var errCutBack = errors.New("a log was cut back below the records taken from it (an unclean leader election)")

// cutBelowTaken returns errCutBack when fetches report a partition of this
// session cut back (kgo.ErrDataLoss: the client resumes at the cut) below
// the records taken from it. The records from the cut on were written
// since, and take would drop them as seen already; so the session ends,
// and the next one takes its partitions afresh from the offsets
// committed. Those are moved back to the cut first: the partition's view
// goes back to it (what was taken past it is no longer on the log), so
// the release that ends the session commits no further than the cut. A
// cut past what was taken changes nothing here.
func (ss *session) cutBelowTaken(fetches kgo.Fetches) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var err error
	fetches.EachError(func(topic string, partition int32, e error) {
		lost, ok := errors.AsType[*kgo.ErrDataLoss](e)
		if !ok {
			return
		}
		if st := ss.parts[tp{topic, partition}]; st != nil && st.next > lost.ResetTo {
			ss.s.Log.Error("a log was cut back below the records the sender took from it; starting a new session to read it from the cut",
				"topic", topic, "partition", partition, "taken_to", st.next, "cut_at", lost.ResetTo)
			err = fmt.Errorf("%w: %s/%d at %d", errCutBack, topic, partition, lost.ResetTo)
			st.next, st.epoch, st.committed = lost.ResetTo, lost.ResetToEpoch, -1
			for off := range st.outstanding {
				if off >= lost.ResetTo {
					delete(st.outstanding, off) // finished or not, no longer on the log
				}
			}
		}
	})
	return err
}

// take accepts one polled record (its buffer slot already held).
func (ss *session) take(r *kgo.Record) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	k := tp{r.Topic, r.Partition}
	st := ss.parts[k]
	if st == nil || st.revoked || r.Offset < st.next {
		<-ss.buffer // not ours any more, or seen already
		return
	}
	st.next, st.epoch = r.Offset+1, r.LeaderEpoch
	st.outstanding[r.Offset] = struct{}{}
	if len(st.parked) > 0 {
		st.parked = append(st.parked, r)
		return
	}
	ss.advance(k, st, []*kgo.Record{r})
}

// advance works records of one partition in order: each due one is
// dispatched; at the first not yet due, the rest is parked and the
// partition paused until then. Called with mu held.
func (ss *session) advance(k tp, st *part, recs []*kgo.Record) {
	now := time.Now()
	for i, r := range recs {
		var t schemas.DeliveryTask
		if err := codec.Unmarshal(r.Value, &t); err != nil || t.DeliveryID == uuid.Nil || t.WebhookID == uuid.Nil {
			if err == nil {
				err = errors.New("delivery task without delivery_id or webhook_id")
			}
			ss.deadLetter(st, r, err)
			continue
		}
		if wait := t.DueAt.Sub(now); wait > 0 && k.topic != ss.s.Naming.Topic(schemas.TopicWebhookDeliveries) {
			st.parked = recs[i:]
			if !st.paused {
				st.paused = true
				ss.cl.PauseFetchPartitions(map[string][]int32{k.topic: {k.partition}})
			}
			st.timer = time.AfterFunc(wait, func() { ss.wake(k, st) })
			return
		}
		ss.dispatch(job{tp: k, part: st, offset: r.Offset, task: t, rec: r})
	}
	st.parked = nil
	if st.paused {
		st.paused = false
		ss.cl.ResumeFetchPartitions(map[string][]int32{k.topic: {k.partition}})
	}
}

// deadLetter moves a task that can never be worked (it cannot be decoded)
// to the sender's dead-letter topic, pod.dlq.delivery.sender, with the same
// headers a stage's dead letter has; only once it is there is its offset
// finished (so committed). If the session ends first, the task stays
// uncommitted and is read, and dead-lettered, again. Called with mu held.
func (ss *session) deadLetter(st *part, r *kgo.Record, cause error) {
	ss.s.Log.Error("dead-lettering undecodable delivery task", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", cause)
	go func() {
		if err := ss.s.deadLetter(ss.ctx, r, cause); err != nil {
			return
		}
		ss.mu.Lock()
		defer ss.mu.Unlock()
		ss.finishLocked(st, r.Offset)
	}()
}

// attemptRecovering makes j's attempt. A panic in it (a bug, or a task
// that trips one) dead-letters the task with the panic as its error, as
// the stage runner does with a record its handler panics on, instead of
// ending the process, which would read the task again and end again. The
// task is finished once its dead letter is on the log. A panic after the
// attempt's outcome is on the log only ends the attempt: the task is
// done, and a dead letter of it, redriven, would deliver it again.
func (ss *session) attemptRecovering(j job, sending func() bool, sent func(time.Duration)) (err error) {
	recorded := false
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		cause := fmt.Errorf("the sender panicked: %v", p)
		msg := "delivery attempt panicked; dead-lettering its task"
		if recorded {
			msg = "delivery attempt panicked after its outcome was recorded"
		}
		ss.s.Log.Error(msg, "topic", j.tp.topic, "partition", j.tp.partition, "offset", j.offset,
			"delivery", j.task.DeliveryID, "err", cause, "stack", string(debug.Stack()))
		err = nil
		if !recorded {
			if err = ss.s.deadLetter(ss.ctx, j.rec, cause); err == nil {
				if rerr := ss.s.Marks.Release(context.WithoutCancel(ss.ctx), j.task, j.tp.topic, j.tp.partition, j.offset); rerr != nil {
					ss.s.Log.Warn("the dead-lettered task's claim was not released; a redrive within 15 minutes skips it",
						"delivery", j.task.DeliveryID, "err", rerr)
				}
			}
		}
	}()
	return ss.s.attempt(ss.ctx, j, sending, sent, func() { recorded = true })
}

func (ss *session) wake(k tp, st *part) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed || st.revoked || ss.parts[k] != st || len(st.parked) == 0 {
		return
	}
	recs := st.parked
	st.parked = nil
	ss.advance(k, st, recs)
}

// dispatch queues j on its endpoint; called with mu held.
func (ss *session) dispatch(j job) {
	now := time.Now()
	e := ss.ends[j.task.WebhookID]
	if e == nil {
		e = &endpoint{}
		ss.ends[j.task.WebhookID] = e
	}
	if e.slow(now) && len(e.queue) >= e.bound(ss.s.PerEndpoint, now) {
		j.part.inflight++
		ss.wg.Add(1)
		go ss.deferJobs([]job{j}, e.drain(ss.s.PerEndpoint, ss.s.Timeout, now))
		return
	}
	e.queue = append(e.queue, j)
	ss.staff(j.task.WebhookID, e, now)
}

// staff starts workers for the endpoint's waiting tasks, as many as no
// worker is free for, up to its limit; called with mu held.
func (ss *session) staff(id uuid.UUID, e *endpoint, now time.Time) {
	for e.running < e.limit(ss.s.PerEndpoint) && e.running-e.inflight < len(e.queue) {
		e.running++
		ss.wg.Add(1)
		go ss.work(id, e, e.slow(now))
	}
}

// trim defers the tasks a backlogged endpoint holds beyond its bound, the
// newest first: its backlog then waits in Kafka, not in this process's
// buffer, and other endpoints keep flowing. Called with mu held.
func (ss *session) trim(e *endpoint, now time.Time) {
	if ss.ctx.Err() != nil || !e.backlogged(ss.s.PerEndpoint, now) {
		return // shutting down: the tasks are left to their next reading
	}
	n := e.bound(ss.s.PerEndpoint, now)
	extra := slices.Clone(e.queue[n:])
	clear(e.queue[n:])
	e.queue = e.queue[:n]
	for _, x := range extra {
		x.part.inflight++
	}
	ss.wg.Add(1)
	go ss.deferJobs(extra, e.drain(ss.s.PerEndpoint, ss.s.Timeout, now))
}

// tend trims every endpoint that went without an answer long enough to
// be backlogged since its last task came (none of its requests ending, no
// dispatch or request of it trims it), and forgets endpoints idle for
// endpointMemory. Called with mu held, every commit tick.
func (ss *session) tend(now time.Time) {
	if ss.closed {
		return // the session waits for its workers: it starts none
	}
	for id, e := range ss.ends {
		ss.trim(e, now)
		if e.running == 0 && len(e.queue) == 0 && now.Sub(e.lastEnd) > endpointMemory {
			delete(ss.ends, id)
		}
	}
}

// endpointMemory is how long an idle endpoint's answer time is kept: its
// next tasks are judged by it, not taken for a new endpoint's.
const endpointMemory = 10 * time.Minute

// work runs jobs of one endpoint until its queue is empty. A request slot
// is taken before a job (and a slow endpoint's slot while the endpoint is
// slow), and the job's partition is checked after, so a job of a
// partition given up meanwhile is left to its next owner.
func (ss *session) work(id uuid.UUID, e *endpoint, slow bool) {
	defer ss.wg.Done()
	for {
		held := slow
		if held {
			ss.slowReqs <- struct{}{}
		}
		ss.reqs <- struct{}{}
		release := func() {
			<-ss.reqs
			if held {
				<-ss.slowReqs
			}
		}
		ss.mu.Lock()
		if !held && e.slow(time.Now()) {
			// It turned slow while this worker waited for the slot: it
			// waits for a slow endpoint's slot first.
			ss.mu.Unlock()
			release()
			slow = true
			continue
		}
		if len(e.queue) == 0 {
			e.running--
			ss.mu.Unlock()
			release()
			return
		}
		j := e.queue[0]
		e.queue = e.queue[1:]
		if j.part.revoked || ss.ctx.Err() != nil {
			slow = e.slow(time.Now())
			ss.mu.Unlock()
			release()
			<-ss.buffer // the next owner reads it again
			continue
		}
		j.part.inflight++
		key := taskKey{j.task.DeliveryID, j.task.Run, j.task.Attempt}
		first, busy := ss.running[key]
		mine := make(chan struct{})
		if !busy {
			ss.running[key] = mine
		}
		ss.mu.Unlock()
		if busy {
			<-first
		}

		// The endpoint's slot is held for the request only: the outcome is
		// recorded (a produce, Redis marks) while this worker goes on with
		// the endpoint's next task. A copy of the task waits for the
		// recording (running), and the offset is finished after it.
		// Only the request itself counts towards the endpoint's stall: not
		// the wait for a slot to record in, nor the claim or the webhook's
		// lookup (Kafka, Redis or Postgres being slow is not the endpoint).
		sentCh := make(chan time.Duration, 1)
		var once sync.Once
		sent := func(took time.Duration) { once.Do(func() { sentCh <- took }) }
		out := false // under mu
		// The partition may have moved on while the attempt waited (for a
		// slot to record in, a copy's recording, the webhook's lookup):
		// its new owner reads the record again, and sending it here too
		// would be a second delivery with no crash to excuse it.
		sending := func() bool {
			ss.mu.Lock()
			defer ss.mu.Unlock()
			if j.part.revoked || ss.parts[j.tp] != j.part {
				return false
			}
			if e.inflight == 0 {
				e.busy = time.Now()
			}
			e.inflight++
			out = true
			return true
		}
		ss.unrecorded <- struct{}{}
		ss.wg.Add(1)
		go func() {
			defer ss.wg.Done()
			err := ss.attemptRecovering(j, sending, sent)
			sent(0)
			if !busy {
				ss.mu.Lock()
				delete(ss.running, key)
				ss.mu.Unlock()
				close(mine)
			}
			ss.done(j, err)
			<-ss.unrecorded
		}()
		took := <-sentCh
		now := time.Now()
		ss.mu.Lock()
		if out {
			e.inflight--
		}
		e.heard = true
		switch {
		case took == 0: // no request made
		case e.latency == 0:
			e.latency = took
		default:
			e.latency = (4*e.latency + took) / 5
		}
		if took > 0 {
			e.lastEnd = now
		}
		ss.trim(e, now)
		ss.staff(id, e, now) // its first answer, or a faster pace, raises its limit
		slow = e.slow(now)
		ss.mu.Unlock()
		release()
	}
}

// done ends a job: finished, or (its outcome not recorded before shutdown)
// left unfinished, so the offset is not committed past it and the next
// owner works it again.
func (ss *session) done(j job, err error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	j.part.inflight--
	if ss.ended != nil {
		close(ss.ended)
		ss.ended = nil
	}
	if err == nil {
		ss.finishLocked(j.part, j.offset)
	} else {
		<-ss.buffer
	}
}

// deferJobs moves tasks of a backlogged endpoint to a retry tier, attempts
// unchanged: its backlog then waits in Kafka, not in this process's buffer,
// and other endpoints keep flowing. The tier is the first whose wait covers
// drain (endpoint.drain), so a task does not come back only to be deferred
// again (an endpoint that always times out would otherwise cycle its whole
// backlog through the first tier).
// A deferral done again (its records read again after a crash) puts the
// tasks on the tier twice; their done marks let one copy of each be
// attempted. A task claimed by a deferred record (its earlier reading's
// attempt was cut short) has its claim handed to its copy on the tier,
// retried while Redis is away; a deferral cut short by shutdown before
// that is done leaves its records unfinished, for their next reading.
// Before its copy is made each task is claimed for its record until past
// the copy's due time (DoneMarks.Reserve), so the copy finds the task done
// even when the record, read again after a crash, attempted it itself. A
// task done, or claimed by another record, is not deferred: that record
// attempts it.
func (ss *session) deferJobs(all []job, drain time.Duration) {
	defer ss.wg.Done()
	tier := DeferTier(ss.s.Delays, drain)
	due := time.Now().UTC().Add(ss.s.Delays[tier])
	// The tasks' Redis calls go at once, a bounded number at a time, so the
	// pipelined client sends them in a few round trips, not one per task.
	mine := make([]bool, len(all))
	var warn sync.Once
	var g errgroup.Group
	g.SetLimit(deferCalls)
	for i, j := range all {
		g.Go(func() error {
			var err error
			mine[i], err = ss.s.Marks.Reserve(context.WithoutCancel(ss.ctx), j.task, j.tp.topic, j.tp.partition, j.offset, ss.s.Delays[tier])
			if err != nil {
				warn.Do(func() {
					ss.s.Log.Warn("claiming deferred tasks failed; deferring them unclaimed (Redis unavailable)", "err", err)
				})
			}
			return nil
		})
	}
	_ = g.Wait()
	jobs := make([]job, 0, len(all))
	for i, j := range all {
		if mine[i] {
			jobs = append(jobs, j)
		} else {
			ss.done(j, nil) // done, or another record's to attempt
		}
	}
	recs := make([]*kgo.Record, 0, len(jobs))
	var err error
	for _, j := range jobs {
		t := j.task
		t.DueAt = due
		var rec *kgo.Record
		if rec, err = TaskRecord(ss.s.Naming.RetryTier(tier), t); err != nil {
			break
		}
		recs = append(recs, rec)
	}
	if err == nil {
		err = ss.s.record(ss.ctx, recs...)
	}
	if err == nil {
		var g errgroup.Group
		g.SetLimit(deferCalls)
		for i, j := range jobs {
			r := recs[i] // its partition and offset are set by the produce
			g.Go(func() error {
				return retry.Do(ss.ctx, retry.WithCappedDuration(5*time.Second, retry.NewExponential(100*time.Millisecond)), func(ctx context.Context) error {
					if err := ss.s.Marks.Move(ctx, j.task, j.tp.topic, j.tp.partition, j.offset, r.Topic, r.Partition, r.Offset); err != nil {
						ss.s.Log.Warn("handing a deferred task's claim to its copy failed; retrying", "delivery", j.task.DeliveryID, "err", err)
						return retry.RetryableError(err)
					}
					return nil
				})
			})
		}
		err = g.Wait()
	}
	for _, j := range jobs {
		if err == nil {
			ss.s.Metrics.outcome("deferred", ClassNone)
		}
		ss.done(j, err)
	}
}

// deferCalls is how many Redis calls of one deferral are under way at once.
const deferCalls = 64

func (ss *session) finishLocked(st *part, offset int64) {
	delete(st.outstanding, offset)
	<-ss.buffer
}
