// Package batch works bulk intakes. A batch's orders are stored as items,
// and runs of items are jobs of the service's one job queue
// (internal/jobs, queue Queue): a worker leases a few runs, works their
// items exactly as single creates with no transaction open, and stores the
// results and ends or reschedules the jobs in one short transaction.
package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/pgnotify"
	"github.com/printpod/pod/internal/wait"
	"github.com/printpod/pod/schemas"
	"github.com/sethvargo/go-retry"
)

// Queue is the batch items' queue in the jobs table.
const Queue = "batch"

const (
	// run is how many items one job holds.
	run = 16
	// worstRound is the longest an item's create can take: its soft
	// duplicate check waits up to 3 × 10 s for earlier holders of its
	// content, its command's send up to 10 s, its decision up to 10 s and
	// its projection up to 10 s.
	worstRound = 60 * time.Second
	// finishBudget bounds finish's transaction. A round's items are
	// worked until twice that before the lease ends, so a holder stores
	// its results before another may lease the job (finish stores nothing
	// for a job leased again since).
	finishBudget = 10 * time.Second
	// lease is how long a worker keeps its runs: a worst round and the
	// finish, with time to spare. When a worker dies its runs come due
	// again after it, and the items it decided find their decisions.
	lease = worstRound + time.Minute
	// A run with undecided items (a dependency away, an internal error)
	// is worked again after retryAfter, doubling up to maxRetryDelay, at
	// most maxAttempts times in all: 5+10+20+40+60×5 s, over six minutes
	// of waits, outlast an outage of a few minutes of Kafka or Postgres.
	// Then its unanswered items are stored with their last answer; an
	// item whose command is on the log undecided (Result.Undecided) stays
	// open until its decision is found.
	retryAfter    = 5 * time.Second
	maxRetryDelay = time.Minute
	maxAttempts   = 10
	// idlePoll is how often an idle worker looks for runs that came due
	// by time; new batches are announced.
	idlePoll = time.Second
	stepWork = "work"
)

// Item is one order of a batch.
type Item struct {
	Batch   uuid.UUID
	Account uuid.UUID
	Index   int
	Body    []byte
	// Sent: an earlier attempt put the item's create on the log, not yet
	// decided; the item waits for that decision.
	Sent bool
	// MaybeSent: an earlier lease of its run worked it and may have put
	// its create on the log without a record of it (the worker stopped
	// before it stored its results); the create looks for its decision
	// once the decider has read the log that far.
	MaybeSent bool
	// LogEnd is the command log's last offsets read once an earlier lease
	// had ended (its run's): a MaybeSent create is on the log below them,
	// if at all.
	LogEnd map[int32]int64
	run    int // the leased run it belongs to (its position in the round)
}

// CommandID is the item's create command id: an item worked twice finds
// its first decision, so it never creates a second order.
func (it Item) CommandID() uuid.UUID {
	return uuid.NewSHA1(it.Batch, fmt.Appendf(nil, "item/%d", it.Index))
}

// Result is what a single create of the item answered.
type Result struct {
	// Status is the HTTP status. A 5xx (a dependency away, an internal
	// error) or 0 (no answer: the round ran out of time) is not final:
	// the item is worked again, up to maxAttempts times in all, and then
	// stored with that answer (a 503 for no answer).
	Status  int
	OrderID *uuid.UUID // on 201
	Error   []byte     // the error body otherwise, in the error catalogue's shape
	// Undecided marks a 5xx whose create command is on the log, not yet
	// decided: the decider will decide it, so the item stays open past
	// maxAttempts (worked every maxRetryDelay) until its decision is
	// found, and its result always matches the order.
	Undecided bool
	// Unknown marks a 5xx of an item that may be on the log (MaybeSent)
	// whose create could not tell yet: it stays open past maxAttempts
	// too, and is not taken for sent. An item that may be on the log and
	// got no answer (Status 0: not worked in the round's time) is taken
	// as Unknown.
	Unknown bool
	// SendFailed marks a 5xx whose create command's send failed, other
	// than by the broker's refusal of its size (order.Refused): the
	// broker may have appended it all the same, so the item stays open
	// past maxAttempts like an Unknown one, until a later attempt finds
	// its decision or that the log holds none.
	SendFailed bool
	// Decided marks the answer of the create's decision, a 5xx too (a
	// create refused as it was dead-lettered): no later attempt changes
	// it.
	Decided bool
}

// final reports whether r is the item's outcome.
func (r Result) final() bool { return r.Decided || (r.Status != 0 && r.Status < 500) }

// retryDelay is how long a run whose attempt left items undecided waits
// for its next attempt: go-retry's exponential backoff from retryAfter,
// capped at maxRetryDelay. ok is false once maxAttempts were made.
func retryDelay(attempt int) (d time.Duration, ok bool) {
	b := retry.WithMaxRetries(maxAttempts-1, retry.WithCappedDuration(maxRetryDelay, retry.NewExponential(retryAfter)))
	for range attempt {
		var stop bool
		if d, stop = b.Next(); stop {
			return 0, false
		}
	}
	return d, true
}

// failedInternally is the result of an item whose create panicked. The
// panic may have come after the create was sent, so the item is not
// stored as failed: it stays open like an Unknown one, worked again (an
// attempt that finds its command decided takes the decision) until a
// release without the bug creates it, or tells it was never sent.
func failedInternally() Result {
	r := errorResult(500, schemas.CodeInternal, "internal error")
	r.Unknown = true
	return r
}

// errorResult is an answer of status with the error catalogue's body.
func errorResult(status int, code, message string) Result {
	body, _ := codec.Marshal(struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}{code, message})
	return Result{Status: status, Error: body}
}

// unanswered is the result stored for an item that got no answer (or one
// without a body) in its last attempt.
func unanswered() Result {
	return errorResult(503, schemas.CodeServiceUnavailable, fmt.Sprintf("the order could not be created in %d attempts over several minutes "+
		"(a dependency of the service was unavailable); it may still be created: look it up before submitting it again", maxAttempts))
}

// runJob is a job's payload: items [From, To) of a batch.
type runJob struct {
	Batch   uuid.UUID `json:"batch"`
	Account uuid.UUID `json:"account"`
	From    int       `json:"from"`
	To      int       `json:"to"`
	// Sent lists the items whose create command an earlier attempt put on
	// the log undecided: they are only waited for, never validated and
	// sent again (what the catalog says now does not matter to them).
	Sent []int `json:"sent,omitempty"`
	// Worked says a lease of the run worked its items before: the items
	// not done may be on the log (Item.MaybeSent). The claim sets it.
	Worked bool `json:"worked,omitempty"`
	// LogEnd is the command log's last offsets, read by the first lease
	// after a worked one and kept while the run's open items only wait
	// for it: the target every later lookup of a MaybeSent item waits for
	// the decider to reach (a fixed one, which a lagging decider still
	// reaches).
	LogEnd map[int32]int64 `json:"log_end,omitempty"`
}

// Retention is how long a batch is kept, from its creation, once every
// item of it is done: then Prune deletes it and its items (a GET of it is
// a 404), like the delivery logs after their 30 days.
const Retention = 30 * 24 * time.Hour

// pruneRun is how many batches one statement of Prune deletes (with up to
// 1,000 items each).
const pruneRun = 20

// Prune deletes the batches created more than keep ago whose items are all
// done, and their items, a run at a time. A batch with an open item (an
// undecided create) is kept until it is done.
func Prune(ctx context.Context, pool *pgxpool.Pool, keep time.Duration) (int64, error) {
	var total int64
	for {
		tag, err := pool.Exec(ctx, `DELETE FROM order_batches WHERE batch_id IN (
			SELECT b.batch_id FROM order_batches b
			WHERE b.created_at < now() - $1::interval
				AND NOT EXISTS (SELECT 1 FROM order_batch_items i WHERE i.batch_id = b.batch_id AND NOT i.done)
			ORDER BY b.created_at LIMIT $2)`, keep.String(), pruneRun)
		if err != nil {
			return total, fmt.Errorf("prune batches: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneRun {
			return total, nil
		}
	}
}

// Stored is what Store did: when the batch was created, and whether this
// call made it (false: it was there already).
type Stored struct {
	CreatedAt time.Time
	Made      bool
}

// Store records a batch of account's order bodies and the jobs that work
// them, in one transaction. A batch id stored before (a keyed request
// repeated after its answer was lost, whose id derives from its
// Idempotency-Key) is left as it is.
func Store(ctx context.Context, pool *pgxpool.Pool, id, account uuid.UUID, bodies [][]byte) (Stored, error) {
	var created time.Time
	var made bool
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO order_batches (batch_id, account_id, total) VALUES ($1, $2, $3)
			ON CONFLICT (batch_id) DO NOTHING RETURNING created_at`, id, account, len(bodies)).Scan(&created)
		if errors.Is(err, pgx.ErrNoRows) {
			return tx.QueryRow(ctx, `SELECT created_at FROM order_batches WHERE batch_id = $1`, id).Scan(&created)
		}
		if err != nil {
			return err
		}
		made = true
		rows := make([][]any, len(bodies))
		for i, body := range bodies {
			rows[i] = []any{id, i, body}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"order_batch_items"}, []string{"batch_id", "idx", "body"}, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		w := jobs.NewWrites(Queue)
		for from := 0; from < len(bodies); from += run {
			payload, err := codec.Marshal(runJob{Batch: id, Account: account, From: from, To: min(from+run, len(bodies))})
			if err != nil {
				return err
			}
			w.Put(jobs.Job{ID: uuid.NewSHA1(id, fmt.Appendf(nil, "items/%d", from)), Step: stepWork, Attempt: 1,
				DueAt: created, Payload: payload})
		}
		b := &pgx.Batch{}
		w.Queue(b)
		return tx.SendBatch(ctx, b).Close()
	})
	return Stored{CreatedAt: created, Made: made && err == nil}, err
}

// Worker works batch items until its context ends. Instances share the
// queue: each leases its own runs.
type Worker struct {
	Pool   *pgxpool.Pool
	Notify *pgnotify.Listener // channel jobs.Notify
	// Work creates one item's order the way a single POST does.
	Work func(ctx context.Context, it Item) Result
	// LogEnd reads the command log's last offsets (order.Bus.LogEnd).
	LogEnd      func(ctx context.Context) (map[int32]int64, error)
	Log         *slog.Logger
	Concurrency int // items worked at once; default 16
}

// Run works jobs until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	if w.Concurrency <= 0 {
		w.Concurrency = 16
	}
	wake, stop := w.Notify.Subscribe(jobs.Notify, Queue)
	defer stop()
	for ctx.Err() == nil {
		_ = wait.Until(ctx, wake, idlePoll, true, func(ctx context.Context) (bool, error) {
			n, err := w.round(ctx)
			if err != nil && ctx.Err() == nil {
				w.Log.Warn("working batch items failed; retrying", "err", err)
			}
			return err == nil && n > 0, err
		})
	}
}

// round leases as many runs as it works items at once, works their
// pending items and stores the results. It returns how many jobs it
// leased.
func (w *Worker) round(ctx context.Context) (int, error) {
	from := time.Now() // the leases last at least until from + lease, whatever Postgres's clock says
	leased, err := w.claim(ctx)
	if err != nil || len(leased) == 0 {
		return 0, err
	}
	// A payload that cannot be read names no items to work: its job ends
	// now, or it would come due again with every lease.
	n := len(leased)
	var runs []runJob
	var bad []jobs.Job
	for _, j := range leased {
		var r runJob
		if err := codec.Unmarshal(j.Payload, &r); err != nil || r.Batch == uuid.Nil || r.From < 0 || r.To < r.From {
			w.Log.Error("batch job payload unreadable; the job is dropped", "job", j.ID, "payload", string(j.Payload), "err", err)
			bad = append(bad, j)
			continue
		}
		leased[len(runs)] = j
		runs = append(runs, r)
	}
	leased = leased[:len(runs)]
	if len(bad) > 0 {
		if err := w.drop(ctx, bad); err != nil {
			return n, err
		}
	}
	if len(runs) == 0 {
		return n, nil
	}
	items, err := w.pending(ctx, runs)
	if err != nil {
		return 0, err
	}
	w.logEnd(ctx, runs, items)
	// The items are worked while the runs stay leased with time to store
	// their results: an item not done by then is undecided, worked again.
	// The deadline is on this worker's clock, from before the claim: the
	// leases' due time is on Postgres's, and a worker whose clock ran
	// ahead of it would work nothing, one behind it past its lease.
	wctx, cancel := context.WithDeadline(ctx, from.Add(lease-2*finishBudget))
	defer cancel()
	results := make([]Result, len(items))
	var wg sync.WaitGroup
	sem := make(chan struct{}, w.Concurrency)
	for i, it := range items {
		select {
		case sem <- struct{}{}:
		case <-wctx.Done():
			continue // undecided
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer func() {
				// A create that panics (a bug a body finds) answers a single
				// POST 500; here it would take the process down, and with
				// it every instance that leases the run after.
				if p := recover(); p != nil {
					w.Log.Error("a batch item's create panicked; it stays open, and is worked again", "batch", it.Batch,
						"index", it.Index, "panic", p, "stack", string(debug.Stack()))
					results[i] = failedInternally()
				}
			}()
			results[i] = w.Work(wctx, it)
		}()
	}
	wg.Wait()
	// The results are stored even when ctx ended meanwhile: a decided
	// item's result is not to be lost.
	bg, cancelFinish := context.WithTimeout(context.WithoutCancel(ctx), finishBudget)
	defer cancelFinish()
	return n, w.finish(bg, leased, runs, items, results)
}

// drop ends jobs that cannot be worked, those still under this worker's
// lease.
func (w *Worker) drop(ctx context.Context, bad []jobs.Job) error {
	return pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		held, err := jobs.Hold(ctx, tx, Queue, bad)
		if err != nil || len(held) == 0 {
			return err
		}
		writes := jobs.NewWrites(Queue)
		for id := range held {
			writes.Delete(id)
		}
		b := &pgx.Batch{}
		writes.Queue(b)
		return tx.SendBatch(ctx, b).Close()
	})
}

func (w *Worker) claim(ctx context.Context) ([]jobs.Job, error) {
	tx, err := w.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	leased, err := jobs.Claim(ctx, tx, Queue, max(1, w.Concurrency/run), lease, nil)
	if err != nil || len(leased) == 0 {
		return nil, err
	}
	// A lease that ends before its results are stored leaves that mark
	// to the next one, and no log end: it may have sent creates past the
	// one it holds (in memory, and written back by its finish), which the
	// next one, taking them for not on the log, could refuse.
	ids := make([]uuid.UUID, len(leased))
	for i, j := range leased {
		ids[i] = j.ID
	}
	if _, err := tx.Exec(ctx, `UPDATE jobs SET payload = (payload - 'log_end') || '{"worked": true}' WHERE queue = $1 AND id = ANY($2)`,
		Queue, ids); err != nil {
		return nil, fmt.Errorf("mark batch runs worked: %w", err)
	}
	return leased, tx.Commit(ctx)
}

// pending reads the items of runs not yet done.
func (w *Worker) pending(ctx context.Context, runs []runJob) ([]Item, error) {
	batches, from, to, accounts := make([]uuid.UUID, len(runs)), make([]int32, len(runs)), make([]int32, len(runs)), make([]uuid.UUID, len(runs))
	for i, r := range runs {
		batches[i], from[i], to[i], accounts[i] = r.Batch, int32(r.From), int32(r.To), r.Account
	}
	rows, err := w.Pool.Query(ctx, `SELECT i.batch_id, r.account, i.idx, i.body, r.n::int - 1
		FROM unnest($1::uuid[], $2::int[], $3::int[], $4::uuid[]) WITH ORDINALITY AS r(batch_id, lo, hi, account, n)
		JOIN order_batch_items i ON i.batch_id = r.batch_id AND i.idx >= r.lo AND i.idx < r.hi
		WHERE NOT i.done`, batches, from, to, accounts)
	if err != nil {
		return nil, fmt.Errorf("read batch items: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Item, error) {
		var it Item
		return it, r.Scan(&it.Batch, &it.Account, &it.Index, &it.Body, &it.run)
	})
	for i := range items {
		r := runs[items[i].run]
		items[i].Sent = slices.Contains(r.Sent, items[i].Index)
		items[i].MaybeSent = r.Worked && !items[i].Sent
	}
	return items, err
}

// logEnd gives the worked runs without one, and their items, the command
// log's last offsets as they are now (LogEnd). Unread (Kafka away), the
// items' creates read it themselves.
func (w *Worker) logEnd(ctx context.Context, runs []runJob, items []Item) {
	var end map[int32]int64
	for i := range runs {
		if !runs[i].Worked || runs[i].LogEnd != nil || w.LogEnd == nil {
			continue
		}
		if end == nil {
			var err error
			if end, err = w.LogEnd(ctx); err != nil {
				w.Log.Warn("the command log's end was not read; the items look it up themselves", "err", err)
				return
			}
		}
		runs[i].LogEnd = end
	}
	for i := range items {
		if items[i].MaybeSent {
			items[i].LogEnd = runs[items[i].run].LogEnd
		}
	}
}

// finish stores the decided items' results, ends the jobs whose items are
// all decided and reschedules the others, in one transaction that holds
// the jobs (jobs.Hold): it acts only for the jobs still under this
// worker's lease. A job whose lease another worker has taken over since is
// that worker's to finish, whatever this worker's clock says. An item
// keeps the first result stored for it.
func (w *Worker) finish(ctx context.Context, leased []jobs.Job, runs []runJob, items []Item, results []Result) error {
	return pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		held, err := jobs.Hold(ctx, tx, Queue, leased)
		if err != nil {
			return err
		}
		b, err := w.finishing(leased, held, runs, items, results)
		if err != nil || b.Len() == 0 {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
}

// finishing is what finish writes for the held jobs.
func (w *Worker) finishing(leased []jobs.Job, heldIDs map[uuid.UUID]bool, runs []runJob, items []Item, results []Result) (*pgx.Batch, error) {
	held := make([]bool, len(leased))
	for i, j := range leased {
		if held[i] = heldIDs[j.ID]; !held[i] {
			w.Log.Warn("batch run no longer under this worker's lease; its results are left to its next holder", "job", j.ID, "lease_end", j.DueAt)
		}
	}
	var batches, orders []uuid.UUID
	var idx, status []int32
	var bodies [][]byte
	open := make([]bool, len(leased))  // a run with an undecided item
	sent := make([][]int, len(leased)) // its items whose command is on the log
	// A run whose open items are all Unknown keeps its log end: none of
	// them sent anything since it was read. Another open item may have
	// (a send that failed in flight), so the next attempt reads it anew.
	fresh := make([]bool, len(leased))
	for i, it := range items {
		r := results[i]
		j := leased[it.run]
		if !held[it.run] {
			continue
		}
		if !r.final() {
			onLog := r.Undecided || it.Sent // its create will be decided
			if onLog {
				sent[it.run] = append(sent[it.run], it.Index)
			}
			// An item that may be on the log and has not learnt whether
			// it is stays open too: a result stored for it could
			// disagree with the order its command makes.
			r.Unknown = r.Unknown || (r.Status == 0 && it.MaybeSent)
			if _, again := retryDelay(j.Attempt); again || onLog || r.Unknown || r.SendFailed {
				w.Log.Warn("batch item not decided; will retry", "batch", it.Batch, "index", it.Index, "attempt", j.Attempt, "status", r.Status)
				open[it.run] = true
				fresh[it.run] = fresh[it.run] || !r.Unknown
				continue
			}
			if r.Status == 0 || r.Error == nil {
				r = unanswered()
			}
			w.Log.Error("batch item not decided in its last attempt; stored as failed", "batch", it.Batch, "index", it.Index,
				"attempt", j.Attempt, "status", r.Status)
		}
		var order uuid.UUID
		if r.OrderID != nil {
			order = *r.OrderID
		}
		batches, idx, status, orders, bodies = append(batches, it.Batch), append(idx, int32(it.Index)),
			append(status, int32(r.Status)), append(orders, order), append(bodies, r.Error)
	}
	writes := jobs.NewWrites(Queue)
	for i, j := range leased {
		switch {
		case !held[i]:
		case open[i]:
			delay, ok := retryDelay(j.Attempt)
			if !ok {
				delay = maxRetryDelay // an undecided item past its attempts
			}
			next := runs[i]
			next.Sent, next.Worked = sent[i], true
			if fresh[i] {
				next.LogEnd = nil
			}
			payload, err := codec.Marshal(next)
			if err != nil {
				return nil, err
			}
			writes.Put(jobs.Job{ID: j.ID, Step: stepWork, Attempt: j.Attempt + 1, DueAt: time.Now().Add(delay), Payload: payload})
		default:
			writes.Delete(j.ID)
		}
	}
	b := &pgx.Batch{}
	if len(batches) > 0 {
		b.Queue(`UPDATE order_batch_items i SET done = true, http_status = r.status,
			order_id = NULLIF(r.order_id, '00000000-0000-0000-0000-000000000000'), result = r.result::json, finished_at = now()
			FROM unnest($1::uuid[], $2::int[], $3::int[], $4::uuid[], $5::text[]) AS r(batch_id, idx, status, order_id, result)
			WHERE i.batch_id = r.batch_id AND i.idx = r.idx AND NOT i.done`, batches, idx, status, orders, jsonTexts(bodies))
	}
	writes.Queue(b)
	return b, nil
}

// jsonTexts passes error bodies as text (nil stays NULL), so the json
// column keeps them byte for byte.
func jsonTexts(bodies [][]byte) []*string {
	out := make([]*string, len(bodies))
	for i, b := range bodies {
		if b != nil {
			s := string(b)
			out[i] = &s
		}
	}
	return out
}
