// Package jobs is the service's one job queue: durable work items in
// Postgres, one row per (queue, id), that workers lease in batches.
//
// A job is due when its due_at has passed. Claiming a job leases it by
// moving its due_at ahead by the lease: no separate lease column, so the
// claim reads only due rows (the index on (queue, due_at) never walks
// leased or parked ones), and a worker that dies leaves its jobs to come
// due again when their lease runs out. What owns a job's life (the order
// decider for pushes) puts, reschedules and deletes it inside its own
// transaction; workers only lease. Putting due work announces the queue on
// Notify so idle workers claim at once.
package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Notify is the Postgres channel on which new due work is announced
// (payload: the queue's name).
const Notify = "jobs"

// Parked is the due time of a job that waits for something other than
// time (a failed push waiting for a manual retry).
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
		b.Queue(`DELETE FROM jobs WHERE queue = $1 AND id = ANY($2)`, w.queue, ids)
	}
	if w.wake {
		b.Queue(`SELECT pg_notify($1, $2)`, Notify, w.queue)
	}
}

// Claim leases up to n due jobs of queue, oldest due first, for lease.
// Jobs locked by another claim in flight are skipped. The lease holds once tx commits; a caller
// that produces records for its jobs does so before committing, so a crash
// leaves the jobs due again and never loses their work.
func Claim(ctx context.Context, tx pgx.Tx, queue string, n int, lease time.Duration) ([]Job, error) {
	rows, err := tx.Query(ctx, `UPDATE jobs j SET due_at = now() + $3::interval
		FROM (SELECT id FROM jobs WHERE queue = $1 AND due_at <= now() ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED) d
		WHERE j.queue = $1 AND j.id = d.id
		RETURNING j.id, j.step, j.attempt, j.due_at, j.payload`, queue, n, lease.String())
	if err != nil {
		return nil, fmt.Errorf("claim %s jobs: %w", queue, err)
	}
	var out []Job
	var j Job
	_, err = pgx.ForEachRow(rows, []any{&j.ID, &j.Step, &j.Attempt, &j.DueAt, &j.Payload}, func() error {
		j.Payload = append([]byte(nil), j.Payload...)
		out = append(out, j)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s jobs: %w", queue, err)
	}
	return out, nil
}
