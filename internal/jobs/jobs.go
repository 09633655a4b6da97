// Package jobs is the service's one job queue: durable work items in
// Postgres, one row per (queue, id), that workers lease in batches.
//
// A job is due when its due_at has passed. Claiming a job leases it by
// moving its due_at ahead by the lease: no separate lease column, so the
// claim reads only due rows (the index on (queue, due_at) never walks
// leased or parked ones), and a worker that dies leaves its jobs to come
// due again when their lease runs out. What owns a job's life (the order
// decider for pushes) puts, reschedules and deletes it inside its own
// transaction. A worker that owns its jobs' life too (the batch worker)
// changes the jobs it leased in a transaction that holds them (Hold).
// Putting due work announces the queue on Notify so idle workers claim at
// once.
package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/printpod/pod/internal/pg"
)

// Notify is the Postgres channel on which new due work is announced
// (payload: the queue's name).
const Notify = "jobs"

// Parked is the due time of a job that waits for something other than
// time (a failed push waiting for a manual retry). The index of due jobs
// (jobs_due) leaves parked jobs out.
var Parked = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// Job is one work item.
type Job struct {
	ID      uuid.UUID
	Step    string // what to do next, in the queue's own terms
	Attempt int
	DueAt   time.Time
	Payload []byte // JSON; nil keeps the stored payload on Put
}

// Writes collects the job changes of one transaction, applied with one
// statement per kind: Queue adds them to a pgx.Batch.
type Writes struct {
	queue   string
	put     map[uuid.UUID]Job
	deleted map[uuid.UUID]bool
	wake    bool
}

// NewWrites collects changes to queue's jobs.
func NewWrites(queue string) *Writes {
	return &Writes{queue: queue, put: map[uuid.UUID]Job{}, deleted: map[uuid.UUID]bool{}}
}

// Put creates or replaces the job j.ID (keeping its payload when
// j.Payload is nil). The last change to an id wins.
func (w *Writes) Put(j Job) {
	if old, ok := w.put[j.ID]; ok && j.Payload == nil {
		j.Payload = old.Payload
	}
	delete(w.deleted, j.ID)
	w.put[j.ID] = j
	if !j.DueAt.After(time.Now()) {
		w.wake = true
	}
}

// Delete drops the job id.
func (w *Writes) Delete(id uuid.UUID) {
	delete(w.put, id)
	w.deleted[id] = true
}

// Queue adds the collected changes to b.
func (w *Writes) Queue(b *pgx.Batch) {
	if len(w.put) > 0 {
		n := len(w.put)
		ids, steps, attempts, due, payloads := make([]uuid.UUID, 0, n), make([]string, 0, n), make([]int32, 0, n),
			make([]time.Time, 0, n), make([][]byte, 0, n)
		for _, j := range w.put {
			ids = append(ids, j.ID)
			steps = append(steps, j.Step)
			attempts = append(attempts, int32(j.Attempt))
			due = append(due, j.DueAt)
			payloads = append(payloads, j.Payload)
		}
		b.Queue(`INSERT INTO jobs (queue, id, step, attempt, due_at, payload)
			SELECT $1, id, step, attempt, due_at, COALESCE(payload, '{}')
			FROM unnest($2::uuid[], $3::text[], $4::int[], $5::timestamptz[], $6::jsonb[]) AS j(id, step, attempt, due_at, payload)
			ON CONFLICT (queue, id) DO UPDATE SET step = excluded.step, attempt = excluded.attempt, due_at = excluded.due_at,
			payload = CASE WHEN excluded.payload = '{}' THEN jobs.payload ELSE excluded.payload END`,
			w.queue, ids, steps, attempts, due, payloads)
	}
	if len(w.deleted) > 0 {
		ids := make([]uuid.UUID, 0, len(w.deleted))
		for id := range w.deleted {
			ids = append(ids, id)
		}
		b.Queue(deleteJobs, w.queue, ids)
	}
	if w.wake {
		b.Queue(`SELECT pg_notify($1, $2)`, Notify, w.queue)
	}
}

// deleteJobs drops jobs by id. jobs_due cannot serve it (its predicate is
// not implied), and the primary key, (id, queue), has no range for a queue
// alone: it looks each id up whatever the statistics say.
const deleteJobs = `DELETE FROM jobs WHERE queue = $1 AND id = ANY($2)`

// claimDue picks the due jobs to lease. Its last condition is jobs_due's
// predicate (not parked): the planner reads a partial index only for a
// statement that implies the predicate.
const claimDue = `SELECT ctid, id, step, attempt, payload FROM jobs
	WHERE queue = $1 AND due_at <= now() AND due_at < '9999-01-01T00:00:00Z'
	ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED`

// Claim leases, of the first n due jobs of queue (oldest due first), those
// pick takes (every one when pick is nil), for lease. Jobs locked by
// another claim in flight are skipped; those pick leaves stay due, locked
// until tx ends. The lease holds once tx commits; a caller that produces
// records for its jobs does so before committing, so a crash leaves the
// jobs due again and never loses their work.
//
// The claim walks the (queue, due_at) index in order and stops after n
// rows. Every lease and every finished job leaves a dead index entry with
// a due time in the past; an ordered index scan marks them as it passes,
// so the next claim skips them, where a bitmap scan (the planner's choice
// when it expects few due rows) reads every one of them, every time, until
// vacuum: thousands of entries a claim at a few hundred pushes a second.
// So bitmap scans are off for the claim's transaction, and sequential
// scans too (the choice on a young table whose statistics say it is
// empty, with the same cost).
func Claim(ctx context.Context, tx pgx.Tx, queue string, n int, lease time.Duration, pick func(Job) bool) ([]Job, error) {
	var due []Job
	var at []pgtype.TID
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)`)
	b.Queue(claimDue, queue, n).Query(func(rows pgx.Rows) error {
		var tid pgtype.TID
		var j Job
		_, err := pgx.ForEachRow(rows, []any{&tid, &j.ID, &j.Step, &j.Attempt, &j.Payload}, func() error {
			j.Payload = append([]byte(nil), j.Payload...)
			if pick == nil || pick(j) {
				due = append(due, j)
				at = append(at, tid)
			}
			return nil
		})
		return err
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("claim %s jobs: %w", queue, err)
	}
	if len(due) == 0 {
		return nil, nil
	}
	// The update finds the picked rows by their physical address (they are
	// locked, so it cannot move): no plan to choose.
	rows, err := tx.Query(ctx, `UPDATE jobs SET due_at = now() + $2::interval WHERE ctid = ANY($1) RETURNING id, due_at`, at, lease.String())
	if err != nil {
		return nil, fmt.Errorf("lease %s jobs: %w", queue, err)
	}
	until := make(map[uuid.UUID]time.Time, len(due))
	var id uuid.UUID
	var t time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &t}, func() error { until[id] = t; return nil }); err != nil {
		return nil, fmt.Errorf("lease %s jobs: %w", queue, err)
	}
	leased := due[:0]
	for _, j := range due {
		if j.DueAt = until[j.ID]; !j.DueAt.IsZero() {
			leased = append(leased, j)
		}
	}
	return leased, nil
}

// returnLeased makes the jobs ($2) of queue $1 still under the lease a
// claim or renewal set ($3) due $5 microseconds from now, and announces the
// queue when it made any due at once.
const returnLeased = `WITH back AS (
		UPDATE jobs j SET due_at = now() + $5::bigint * interval '1 microsecond' FROM unnest($2::uuid[], $3::timestamptz[]) AS l(id, lease)
		WHERE j.queue = $1 AND j.id = ANY($2) AND j.id = l.id AND j.due_at = l.lease RETURNING j.id),
	told AS (SELECT pg_notify($4, $1) FROM (SELECT 1 FROM back LIMIT 1) AS first WHERE $5::bigint = 0)
	SELECT (SELECT count(*) FROM back), (SELECT count(*) FROM told)`

// Return gives the leased jobs (with the due time their lease set, as
// Claim or Renew returned them) back to queue, due after after, and
// announces the queue when that is at once: a worker that stops with jobs
// it has not started lets the others take them now, and one that sheds a
// slow store's pushes lets them come back soon, rather than when their
// leases would end. A job another worker has leased since, or that was
// ended or moved on, is left as it is. It returns how many it gave back.
func Return(ctx context.Context, db pg.Querier, queue string, leased []Job, after time.Duration) (int, error) {
	if len(leased) == 0 {
		return 0, nil
	}
	ids, leases := leaseColumns(leased)
	var back, told int
	rows, err := db.Query(ctx, returnLeased, queue, ids, leases, Notify, max(after, 0).Microseconds())
	if err == nil {
		_, err = pgx.ForEachRow(rows, []any{&back, &told}, func() error { return nil })
	}
	if err != nil {
		return 0, fmt.Errorf("return %s jobs: %w", queue, err)
	}
	return back, nil
}

// leaseColumns are the ids of leased jobs and the due times their leases
// set (the fences), as the two arrays a statement unnests.
func leaseColumns(leased []Job) ([]uuid.UUID, []time.Time) {
	ids, leases := make([]uuid.UUID, len(leased)), make([]time.Time, len(leased))
	for i, j := range leased {
		ids[i], leases[i] = j.ID, j.DueAt
	}
	return ids, leases
}

// underLease finds the jobs ($2) of queue $1 whose due time is still the
// one their lease set ($3). The id list is given twice so the primary key
// serves it whatever the join order.
const underLease = `SELECT j.id FROM jobs j JOIN unnest($2::uuid[], $3::timestamptz[]) AS l(id, lease) ON j.id = l.id AND j.due_at = l.lease
	WHERE j.queue = $1 AND j.id = ANY($2)`

// holdLeased locks the jobs whose due time is still the one their lease
// set.
const holdLeased = underLease + ` FOR UPDATE OF j`

// Hold locks, in tx, those of the leased jobs (as Claim returned them)
// that are still under that lease, and says which: their due time is still
// the one the claim set. Until tx ends no claim can lease them, so what tx
// writes for a held job is its holder's to write. A job another worker has
// leased since, or that was ended, is not held, however far the caller's
// clock is from the database's; one still under the caller's lease is held
// even past the lease's end.
func Hold(ctx context.Context, tx pgx.Tx, queue string, leased []Job) (map[uuid.UUID]bool, error) {
	ids, leases := leaseColumns(leased)
	rows, err := tx.Query(ctx, holdLeased, queue, ids, leases)
	if err != nil {
		return nil, fmt.Errorf("hold %s jobs: %w", queue, err)
	}
	held := map[uuid.UUID]bool{}
	var id uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { held[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("hold %s jobs: %w", queue, err)
	}
	return held, nil
}

// renewLeased moves ahead the due time of the jobs still under the lease
// their holder set, skipping rows another transaction has locked (the
// decider writing the job, a claim), and tells of each job given whether
// it was renewed (its new due time), or is still as the holder left it (in
// the statement's snapshot: locked, not renewed this time). A job neither
// renewed nor still as left was ended or leased by another. A renewal
// committed whose answer did not come back leaves its holder with the old
// due time: the next renewal finds the job lost and its push is stopped,
// to be taken over (a call made twice, never two at once).
const renewLeased = `WITH held AS (` + underLease + ` FOR UPDATE OF j SKIP LOCKED),
	renewed AS (UPDATE jobs j SET due_at = now() + $4::interval FROM held WHERE j.queue = $1 AND j.id = held.id RETURNING j.id, j.due_at)
	SELECT l.id, r.due_at, j.id IS NOT NULL
	FROM unnest($2::uuid[], $3::timestamptz[]) AS l(id, lease)
	LEFT JOIN renewed r ON r.id = l.id
	LEFT JOIN jobs j ON j.queue = $1 AND j.id = l.id AND j.due_at = l.lease AND j.id = ANY($2)`

// Renew extends by lease the leases of the leased jobs (as Claim or the
// last Renew returned them) that are still under them: renewed are their
// new leases. Lost are those ended or leased by another since. A job in
// neither was locked by another transaction at that moment and is left as
// it was, to be renewed again.
func Renew(ctx context.Context, db pg.Querier, queue string, leased []Job, lease time.Duration) (renewed []Job, lost []uuid.UUID, err error) {
	ids, leases := leaseColumns(leased)
	byID := make(map[uuid.UUID]Job, len(leased))
	for _, j := range leased {
		byID[j.ID] = j
	}
	rows, err := db.Query(ctx, renewLeased, queue, ids, leases, lease.String())
	if err != nil {
		return nil, nil, fmt.Errorf("renew %s jobs: %w", queue, err)
	}
	var id uuid.UUID
	var due pgtype.Timestamptz
	var kept bool
	_, err = pgx.ForEachRow(rows, []any{&id, &due, &kept}, func() error {
		switch {
		case due.Valid:
			j := byID[id]
			j.DueAt = due.Time
			renewed = append(renewed, j)
		case !kept:
			lost = append(lost, id)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("renew %s jobs: %w", queue, err)
	}
	return renewed, lost, nil
}
