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

const recordColumns = `id, webhook_id, event_id, topic, payload, status, attempts, last_status_code, last_error,
	next_retry_at, delivered_at, created_at, run, run_attempt, gen`

func scanRecord(row pgx.Row) (Record, error) {
	var r Record
	var payload []byte
	err := row.Scan(&r.ID, &r.WebhookID, &r.EventID, &r.Topic, &payload, &r.Status, &r.Attempts, &r.LastStatusCode,
		&r.LastError, &r.NextRetryAt, &r.DeliveredAt, &r.CreatedAt, &r.Run, &r.RunAttempt, &r.Gen)
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

// List returns up to limit deliveries of the account's webhook, newest
// first, after pos when given, with the given status when not empty.
func (q Queries) List(ctx context.Context, account, webhook uuid.UUID, status string, pos *Position, limit int) ([]Record, error) {
	var after *time.Time
	var afterID uuid.UUID
	if pos != nil {
		after, afterID = &pos.CreatedAt, pos.ID
	}
	rows, err := q.Pool.Query(ctx, `SELECT `+recordColumns+` FROM webhook_deliveries
		WHERE webhook_id = $1 AND account_id = $2 AND ($3 = '' OR status = $3)
		AND ($4::timestamptz IS NULL OR (created_at, id) < ($4, $5))
		ORDER BY created_at DESC, id DESC LIMIT $6`, webhook, account, status, after, afterID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Record{}
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Get reads one delivery of the account's webhook; ok is false when there
// is none.
func (q Queries) Get(ctx context.Context, account, webhook, id uuid.UUID) (Record, bool, error) {
	r, err := scanRecord(q.Pool.QueryRow(ctx, `SELECT `+recordColumns+` FROM webhook_deliveries
		WHERE id = $1 AND webhook_id = $2 AND account_id = $3`, id, webhook, account))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	return r, err == nil, err
}

// Created records a delivery the API made (a test delivery) once its task
// is published, so it is listed as soon as the request is answered; the
// projector's insert of the same task changes nothing.
func (q Queries) Created(ctx context.Context, t schemas.DeliveryTask) (Record, error) {
	return scanRecord(q.Pool.QueryRow(ctx, `INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id, topic, payload,
			status, run, gen, next_retry_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $9, $10)
		ON CONFLICT (id) DO UPDATE SET updated_at = webhook_deliveries.updated_at
		RETURNING `+recordColumns, t.DeliveryID, t.WebhookID, t.AccountID, t.EventID, t.Topic, string(t.Payload), t.Run, t.Gen,
		t.DueAt, t.CreatedAt))
}

// Requeued marks a failed or cancelled delivery pending again for a new
// run (a manual resend) whose task was published; ok is false when the
// delivery was no longer failed or cancelled at the run before.
func (q Queries) Requeued(ctx context.Context, r Record, run, gen int, due time.Time) (Record, bool, error) {
	out, err := scanRecord(q.Pool.QueryRow(ctx, `UPDATE webhook_deliveries SET status = 'pending', run = $2, run_attempt = 0,
			gen = $3, next_retry_at = $4, updated_at = now()
		WHERE id = $1 AND run = $5 AND status IN ('failed', 'cancelled')
		RETURNING `+recordColumns, r.ID, run, gen, due, r.Run))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	return out, err == nil, err
}
