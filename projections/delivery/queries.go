package delivery

import (
	"context"
	"errors"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/schemas"
)

// Record is the Webhook delivery shape of the interface.
type Record struct {
	ID             uuid.UUID       `json:"id"`
	WebhookID      uuid.UUID       `json:"webhook_id"`
	EventID        uuid.UUID       `json:"event_id"`
	Topic          string          `json:"topic"`
	Payload        json.RawMessage `json:"payload"`
	Status         string          `json:"status"`
	Attempts       int             `json:"attempts"`
	LastStatusCode *int            `json:"last_status_code"`
	LastError      *string         `json:"last_error"`
	NextRetryAt    *time.Time      `json:"next_retry_at"`
	DeliveredAt    *time.Time      `json:"delivered_at"`
	CreatedAt      time.Time       `json:"created_at"`

	Run        int `json:"-"`
	RunAttempt int `json:"-"`
	Gen        int `json:"-"`
}

// Queries read the delivery log.
type Queries struct{ Pool *pgxpool.Pool }

// selectRecords reads deliveries from source (the table, or the rows a
// statement returns, named d) as the API shows them. A pending delivery
// whose webhook is no longer active for its generation (disabled, or
// enabled again since, which starts a new one; or deleted meanwhile) is
// shown cancelled, with no next retry: the sender cancels its task when it
// comes to it (Outcome, for a webhook not active at the task's
// generation), which leaves the row so. Only an attempt already under way
// at the disable ends with its own outcome (failed after its last attempt,
// success). Nothing rewrites such rows in bulk, so a delivery's status is
// in no index, and its results are written in place (HOT).
//
// Columns in extra follow the record's, for scanRecord's extra.
func selectRecords(source string, extra ...string) string {
	var more string
	for _, e := range extra {
		more += ", " + e
	}
	return `SELECT d.id, d.webhook_id, d.event_id, d.topic, d.payload, ` + shownStatus + `, d.attempts, d.last_status_code,
			CASE WHEN c.off THEN 'webhook_disabled' ELSE d.last_error END, CASE WHEN c.off THEN NULL ELSE d.next_retry_at END,
			d.delivered_at, d.created_at, d.run, d.run_attempt, d.gen` + more + `
		FROM ` + source + ` d LEFT JOIN webhooks w ON w.id = d.webhook_id
			CROSS JOIN LATERAL (SELECT ` + cancelledSince + ` AS off) c`
}

// cancelledSince holds for a pending delivery d whose webhook w is no
// longer active for its generation, or gone (w is null).
const cancelledSince = `d.status = 'pending' AND NOT coalesce(w.is_active AND w.gen = d.gen, false)`

// shownStatus is a delivery's status as selectRecords shows it.
const shownStatus = `CASE WHEN c.off THEN 'cancelled' ELSE d.status END`

// scanRecord reads a row of selectRecords, and its extra columns into
// extra.
func scanRecord(row pgx.Row, extra ...any) (Record, error) {
	var r Record
	var payload []byte
	err := row.Scan(append([]any{&r.ID, &r.WebhookID, &r.EventID, &r.Topic, &payload, &r.Status, &r.Attempts,
		&r.LastStatusCode, &r.LastError, &r.NextRetryAt, &r.DeliveredAt, &r.CreatedAt, &r.Run, &r.RunAttempt, &r.Gen},
		extra...)...)
	if payload == nil {
		payload = []byte("null")
	}
	r.Payload = payload
	return r, err
}

// Position is a keyset position in a deliveries list (newest first).
type Position struct {
	CreatedAt time.Time `json:"t"`
	ID        uuid.UUID `json:"id"`
}

// FilterScan is how many deliveries one page of a status-filtered list
// looks through at most, newest first. No index holds a delivery's status
// (see selectRecords), so a rare status of a busy webhook would otherwise
// be looked for through its whole 30 days in one request.
const FilterScan = 10_000

// List returns up to limit deliveries of the account's webhook, newest
// first, after pos when given, with the given status when not empty. A
// filtered page looks through at most FilterScan deliveries; when it
// stopped there with fewer than limit found, resume is the last one it
// looked at, where the next page goes on.
func (q Queries) List(ctx context.Context, account, webhook uuid.UUID, status string, pos *Position, limit int) (
	recs []Record, resume *Position, err error) {
	var after *time.Time
	var afterID uuid.UUID
	if pos != nil {
		after, afterID = &pos.CreatedAt, pos.ID
	}
	scan := FilterScan
	if status == "" {
		scan = limit
	}
	// The scan numbers the rows it reads (n); the last one is read out
	// whatever its status, to resume from.
	rows, err := q.Pool.Query(ctx, selectRecords(`(SELECT *, row_number() OVER (ORDER BY created_at DESC, id DESC) AS n
			FROM webhook_deliveries
			WHERE webhook_id = $1 AND account_id = $2 AND ($4::timestamptz IS NULL OR (created_at, id) < ($4, $5))
			ORDER BY created_at DESC, id DESC LIMIT $7)`, "d.n")+`
		WHERE $3 IN ('', `+shownStatus+`) OR d.n = $7
		ORDER BY d.created_at DESC, d.id DESC LIMIT $6 + 1`, webhook, account, status, after, afterID, limit, scan)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	recs = []Record{}
	for rows.Next() {
		var n int64
		r, err := scanRecord(rows, &n)
		if err != nil {
			return nil, nil, err
		}
		if (status == "" || r.Status == status) && len(recs) < limit {
			recs = append(recs, r)
		}
		if n == int64(scan) && len(recs) < limit {
			resume = &Position{CreatedAt: r.CreatedAt, ID: r.ID}
		}
	}
	return recs, resume, rows.Err()
}

// Get reads one delivery of the account's webhook; ok is false when there
// is none.
func (q Queries) Get(ctx context.Context, account, webhook, id uuid.UUID) (Record, bool, error) {
	r, err := scanRecord(q.Pool.QueryRow(ctx, selectRecords("webhook_deliveries")+`
		WHERE d.id = $1 AND d.webhook_id = $2 AND d.account_id = $3`, id, webhook, account))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	return r, err == nil, err
}

// Created records a delivery the API made (a test delivery) once its task
// is published, so it is listed as soon as the request is answered; the
// projector's insert of the same task changes nothing.
func (q Queries) Created(ctx context.Context, t schemas.DeliveryTask) (Record, error) {
	return scanRecord(q.Pool.QueryRow(ctx, `WITH created AS (INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id,
			topic, payload, status, run, gen, next_retry_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $9, $10)
		ON CONFLICT (id) DO UPDATE SET updated_at = webhook_deliveries.updated_at
		RETURNING *) `+selectRecords("created"), t.DeliveryID, t.WebhookID, t.AccountID, t.EventID, t.Topic, string(t.Payload), t.Run, t.Gen,
		t.DueAt, t.CreatedAt))
}

// Requeued marks a failed or cancelled delivery (as selectRecords shows
// it) pending again for a new run (a manual resend) whose task was
// published; ok is false when the delivery was no longer failed or
// cancelled at the run before.
func (q Queries) Requeued(ctx context.Context, r Record, run, gen int, due time.Time) (Record, bool, error) {
	out, err := scanRecord(q.Pool.QueryRow(ctx, `WITH requeued AS (UPDATE webhook_deliveries d SET status = 'pending', run = $2,
			run_attempt = 0, gen = $3, next_retry_at = $4, updated_at = now()
		FROM webhooks w
		WHERE d.id = $1 AND d.run = $5 AND w.id = d.webhook_id
			AND (d.status IN ('failed', 'cancelled') OR (`+cancelledSince+`))
		RETURNING d.*) `+selectRecords("requeued"), r.ID, run, gen, due, r.Run))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	return out, err == nil, err
}
