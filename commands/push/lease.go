package push

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/pg"
)

// Leases of push jobs (defaults of a Worker's leases).
const (
	// lease is how long a claim or a renewal leases a job: how long a
	// worker that stops keeps its pushes from the others.
	lease = 40 * time.Second
	// renewEvery is how often a held job's lease is renewed.
	renewEvery = 5 * time.Second
	// stopMargin is how long before its lease ends, by the worker's own
	// clock, a push whose lease could not be renewed is stopped: its call
	// is cut off and its outcome not sent, so none is in flight when
	// another worker may take the job over.
	stopMargin = 10 * time.Second
	// outcomeWait is how long a worker keeps a push leased after its
	// outcome is on the log, waiting for the decider to decide it: a
	// takeover before then would call the platform again.
	outcomeWait = 2 * time.Minute
	// giveBackWait bounds the statement that gives back the pushes of a
	// stopping worker not started (leases.giveBack).
	giveBackWait = 5 * time.Second
)

// leases keeps the pushes a worker works leased for as long as it works
// them. Every renewEvery it renews, in one statement (jobs.Renew), the
// lease of each push it has not renewed for that long, fenced on the due
// time it set last: a job the decider moved on (its push decided) or that
// another worker leased is let go. A push whose lease was not renewed in
// time (Postgres away, or not answering) is stopped by its own timer: its
// context ends stopMargin before the lease does, whatever a renewal in
// flight waits for. So a call may take as long as the platform needs, and
// a worker that stops leaves its pushes to the others within one lease.
type leases struct {
	db   pg.Querier
	log  *slog.Logger
	term time.Duration // the lease (default lease)
	// every is how often leases are renewed; margin is stopMargin.
	every, margin time.Duration

	mu   sync.Mutex
	held map[uuid.UUID]*leased
}

// leased is one push a worker holds.
type leased struct {
	ctx    context.Context // ends when the push is to stop: its lease lost or about to end
	cancel context.CancelFunc
	job    jobs.Job    // DueAt is the job's due time as this worker set it last: the fence
	until  time.Time   // by this worker's clock, a time the lease lasts at least until
	timer  *time.Timer // stops the push stopMargin before until; nil for a lease stopped at once
}

func newLeases(db pg.Querier, log *slog.Logger) *leases {
	return &leases{db: db, log: log, term: lease, every: renewEvery, margin: stopMargin, held: map[uuid.UUID]*leased{}}
}

// hold starts keeping job j, which a claim begun at from leased. A claim
// that took so long that the lease ends within the stop margin gives a
// lease already stopped: its push is the next lease's.
func (ls *leases) hold(ctx context.Context, j jobs.Job, from time.Time) *leased {
	l := &leased{job: j, until: from.Add(ls.term)}
	l.ctx, l.cancel = context.WithCancel(ctx)
	if time.Until(l.until) < ls.margin {
		l.cancel()
		return l
	}
	ls.mu.Lock()
	if old := ls.held[j.ID]; old != nil {
		ls.drop(old) // a lease of ours that ran out and was claimed again
	}
	ls.held[j.ID] = l
	l.timer = time.AfterFunc(time.Until(l.until)-ls.margin, func() { ls.expire(l) })
	ls.mu.Unlock()
	return l
}

// end stops keeping l: the push is over, or left to the job's next lease.
func (ls *leases) end(l *leased) {
	ls.mu.Lock()
	ls.drop(l)
	ls.mu.Unlock()
}

// giveBack stops keeping held, pushes this worker leaves without having
// started their calls (it stops, or sheds a slow store's), and gives
// their jobs back to the queue, due after after (jobs.Return): they are
// worked then, not when their leases end. A lease this worker no longer
// keeps (lost, expired) is not given back; one another worker has taken
// since is left by the fence. A return that fails leaves the jobs to their
// leases' end.
func (ls *leases) giveBack(ctx context.Context, held []*leased, after time.Duration) {
	ls.returnJobs(ctx, ls.letGo(held), after)
}

// letGo stops keeping held and returns the jobs of those this worker still
// kept, with their due times as last set (the fences), for returnJobs.
func (ls *leases) letGo(held []*leased) []jobs.Job {
	var back []jobs.Job
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, l := range held {
		if ls.held[l.job.ID] == l {
			back = append(back, l.job)
		}
		ls.drop(l)
	}
	return back
}

// returnJobs gives back jobs letGo let go, due after after.
func (ls *leases) returnJobs(ctx context.Context, back []jobs.Job, after time.Duration) {
	if len(back) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackWait)
	defer cancel()
	if _, err := jobs.Return(rctx, ls.db, order.PushQueue, back, after); err != nil {
		ls.log.Warn("giving back pushes not started failed; they are worked again when their leases end", "pushes", len(back), "err", err)
	}
}

// drop stops keeping l and ends its push's context; ls.mu is held.
func (ls *leases) drop(l *leased) {
	if ls.held[l.job.ID] == l {
		delete(ls.held, l.job.ID)
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	l.cancel()
}

// expire stops l, whose lease is about to end unrenewed (its timer fired;
// a renewal that got in first re-armed it instead).
func (ls *leases) expire(l *leased) {
	ls.mu.Lock()
	if time.Until(l.until) >= ls.margin {
		ls.mu.Unlock()
		return
	}
	if ls.held[l.job.ID] == l {
		ls.log.Warn("a push's lease could not be renewed; stopping it before another worker may take it",
			"order", l.job.ID, "lease_end", l.until)
	}
	ls.drop(l)
	ls.mu.Unlock()
}

// run renews leases until ctx ends; then every push held stops.
func (ls *leases) run(ctx context.Context) {
	t := time.NewTicker(ls.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			ls.mu.Lock()
			for _, l := range ls.held {
				ls.drop(l)
			}
			ls.mu.Unlock()
			return
		case <-t.C:
			ls.renew(ctx)
		}
	}
}

// renew renews the leases not renewed for most of every (a tick comes a
// little late), and lets go of those lost. A renewal gets one period:
// Postgres not answering holds up no more than that.
func (ls *leases) renew(ctx context.Context) {
	now := time.Now()
	var due []jobs.Job
	ls.mu.Lock()
	for _, l := range ls.held {
		if l.until.Sub(now) <= ls.term-ls.every/2 {
			due = append(due, l.job)
		}
	}
	ls.mu.Unlock()
	if len(due) == 0 {
		return
	}
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, ls.every)
	renewed, lost, err := jobs.Renew(rctx, ls.db, order.PushQueue, due, ls.term)
	cancel()
	if err != nil && ctx.Err() == nil {
		ls.log.Warn("renewing push leases failed; retrying", "pushes", len(due), "err", err)
	}
	asked := make(map[uuid.UUID]time.Time, len(due))
	for _, j := range due {
		asked[j.ID] = j.DueAt
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	// still finds the push a renewal was asked for: not ended, nor held
	// again under a new claim, meanwhile.
	still := func(id uuid.UUID) *leased {
		if l := ls.held[id]; l != nil && l.job.DueAt.Equal(asked[id]) {
			return l
		}
		return nil
	}
	for _, j := range renewed {
		if l := still(j.ID); l != nil {
			l.job.DueAt, l.until = j.DueAt, sent.Add(ls.term)
			l.timer.Reset(time.Until(l.until) - ls.margin)
		}
	}
	for _, id := range lost {
		if l := still(id); l != nil {
			ls.drop(l)
		}
	}
}
