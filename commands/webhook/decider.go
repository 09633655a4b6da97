package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DeciderName is the decider's consumer group and offsets key.
const DeciderName = "webhook-decider"

// NotifyDecided is the Postgres channel a decision is announced on (payload:
// the command id).
const NotifyDecided = "webhook_decided"

// Decisions is the decider's decision table.
var Decisions = pg.Decisions{Table: "webhook_decisions", Notify: NotifyDecided}

// Decider applies webhook commands. Per batch one transaction holds the
// consumed offsets, the webhooks' new state and the decisions; the handler
// returns the batch's events, which the stage runner produces before that
// transaction commits. Ids derive from the command, so a batch done again
// after a crash emits the same events (consumers dedupe on the id) and
// never loses one.
type Decider struct {
	Log    *slog.Logger
	Naming schemas.Naming // topic names on the cluster
}

// Consumer is the decider's stream consumer.
func (d *Decider) Consumer() stream.Consumer {
	return stream.Consumer{Name: DeciderName, Topics: []string{d.Naming.Topic(schemas.TopicWebhookCommands)}, Handle: d.handle, MaxBatch: 500}
}

const webhookColumns = `id, account_id, url, description, topics, is_active, disabled_reason, gen, secret,
	previous_secret, previous_secret_until, created_at, updated_at`

func scanWebhook(row pgx.Row) (*Webhook, error) {
	var w Webhook
	err := row.Scan(&w.ID, &w.AccountID, &w.URL, &w.Description, &w.Topics, &w.IsActive, &w.DisabledReason, &w.Gen,
		&w.Secret, &w.PreviousSecret, &w.PreviousSecretUntil, &w.CreatedAt, &w.UpdatedAt)
	return &w, err
}

// decodeCommand reads a command record; one without ids cannot be decided.
func decodeCommand(b []byte, c *Command) error {
	if err := json.Unmarshal(b, c); err != nil {
		return err
	}
	if c.ID == uuid.Nil || c.AccountID == uuid.Nil {
		return errors.New("no command id or account id")
	}
	return nil
}

func (d *Decider) handle(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
	var cmds []Command
	var times []time.Time
	var ids, accounts []uuid.UUID
	for _, r := range recs {
		var c Command
		if err := decodeCommand(r.Value, &c); err != nil {
			// The runner dead-letters it; the rest go on.
			return nil, stream.Poison(fmt.Errorf("webhook command %d/%d: %w", r.Partition, r.Offset, err))
		}
		cmds = append(cmds, c)
		times = append(times, r.Timestamp)
		ids = append(ids, c.ID)
		accounts = append(accounts, c.AccountID)
	}
	if len(cmds) == 0 {
		return nil, nil
	}
	decided, err := Decisions.Decided(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	// Every webhook of the batch's clients, locked: the limit counts them.
	byAccount := map[uuid.UUID]map[uuid.UUID]*Webhook{}
	rows, err := tx.Query(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE account_id = ANY($1) FOR UPDATE`, accounts)
	if err != nil {
		return nil, fmt.Errorf("load webhooks: %w", err)
	}
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("load webhooks: %w", err)
		}
		if byAccount[w.AccountID] == nil {
			byAccount[w.AccountID] = map[uuid.UUID]*Webhook{}
		}
		byAccount[w.AccountID][w.ID] = w
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load webhooks: %w", err)
	}

	batch := &pgx.Batch{}
	var events []*kgo.Record
	var notify, announced []string
	// Stored and announced alike, so a waiter reading either sees the same.
	decidedAt := time.Now().UTC().Truncate(time.Microsecond)
	for i, c := range cmds {
		if decided[c.ID] {
			continue
		}
		decided[c.ID] = true
		hooks := byAccount[c.AccountID]
		if hooks == nil {
			hooks = map[uuid.UUID]*Webhook{}
			byAccount[c.AccountID] = hooks
		}
		at := times[i]
		if at.IsZero() {
			at = time.Now()
		}
		ch, err := Decide(hooks, c, at)
		var code, msg string
		switch {
		case errors.Is(err, ErrNotFound):
			code, msg = schemas.CodeNotFound, "webhook not found"
		case errors.Is(err, ErrLimitReached):
			code, msg = schemas.CodeWebhookLimitReached, fmt.Sprintf("this client already has %d webhooks; delete one first", MaxPerClient)
		case err != nil:
			d.Log.Warn("webhook command refused", "command", c.ID, "kind", c.Kind, "err", err)
			code, msg = schemas.CodeValidation, err.Error()
		}
		batch.Queue(`INSERT INTO webhook_decisions (command_id, webhook_id, error_code, error_message, decided_at)
			VALUES ($1, $2, NULLIF($3, ''), NULLIF($4, ''), $5)`, c.ID, c.WebhookID, code, msg, decidedAt)
		notify = append(notify, c.ID.String())
		announcement, _ := json.Marshal(Decision{Code: code, Message: msg, DecidedAt: decidedAt})
		announced = append(announced, string(announcement))
		if err != nil || ch.EventType == "" {
			continue
		}
		fact := schemas.WebhookFact{ID: c.WebhookID, AccountID: c.AccountID, UpdatedAt: at.UTC()}
		if ch.Webhook != nil {
			w := ch.Webhook
			hooks[w.ID] = w
			fact = w.Fact()
			batch.Queue(`INSERT INTO webhooks (`+webhookColumns+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)
				ON CONFLICT (id) DO UPDATE SET url = excluded.url, description = excluded.description, topics = excluded.topics,
				is_active = excluded.is_active, disabled_reason = excluded.disabled_reason, gen = excluded.gen,
				secret = excluded.secret, previous_secret = excluded.previous_secret,
				previous_secret_until = excluded.previous_secret_until, updated_at = excluded.updated_at`,
				w.ID, w.AccountID, w.URL, w.Description, w.Topics, w.IsActive, w.DisabledReason, w.Gen, w.Secret,
				w.PreviousSecret, w.PreviousSecretUntil, w.CreatedAt, w.UpdatedAt)
		} else {
			delete(hooks, c.WebhookID)
			batch.Queue(`DELETE FROM webhooks WHERE id = $1`, c.WebhookID)
		}
		ev, err := schemas.NewEventWithID(uuid.NewSHA1(c.ID, []byte("event")), ch.EventType, at, fact)
		if err != nil {
			return nil, err
		}
		value, err := json.Marshal(ev)
		if err != nil {
			return nil, err
		}
		events = append(events, &kgo.Record{Topic: d.Naming.Topic(schemas.TopicWebhookEvents), Key: []byte(c.AccountID.String()), Value: value,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderEventType, Value: []byte(ch.EventType)}}})
	}
	Decisions.QueueAnnounce(batch, notify, announced)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, fmt.Errorf("store webhook decisions: %w", err)
	}
	return events, nil
}

// Decision is the outcome of one webhook command. The json names are
// those of its announcement.
type Decision struct {
	Code      string    `json:"e,omitempty"` // "" when accepted
	Message   string    `json:"m,omitempty"`
	DecidedAt time.Time `json:"t"`
}

// parseDecision reads a decision from its announcement.
func parseDecision(v string) (Decision, bool) {
	var d Decision
	if err := json.Unmarshal([]byte(v), &d); err != nil || d.DecidedAt.IsZero() {
		return Decision{}, false
	}
	return d, true
}

// LoadDecision reads a command's decision; ok is false while undecided.
func LoadDecision(ctx context.Context, pool *pgxpool.Pool, commandID uuid.UUID) (d Decision, ok bool, err error) {
	var code, msg *string
	err = pool.QueryRow(ctx, `SELECT error_code, error_message, decided_at FROM webhook_decisions WHERE command_id = $1`,
		commandID).Scan(&code, &msg, &d.DecidedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Decision{}, false, nil
	}
	if err != nil {
		return Decision{}, false, err
	}
	if code != nil {
		d.Code = *code
	}
	if msg != nil {
		d.Message = *msg
	}
	return d, true, nil
}

// Load reads one webhook of the account (nil when there is none).
func Load(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, account, id uuid.UUID) (*Webhook, error) {
	w, err := scanWebhook(q.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE id = $1 AND account_id = $2`, id, account))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return w, err
}

// List reads the account's webhooks, newest first, after the keyset
// position (created_at, id) when after is set.
func List(ctx context.Context, pool *pgxpool.Pool, account uuid.UUID, after *time.Time, afterID uuid.UUID, limit int) ([]*Webhook, error) {
	rows, err := pool.Query(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE account_id = $1
		AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3)) ORDER BY created_at DESC, id DESC LIMIT $4`,
		account, after, afterID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Webhook
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// DecisionRetention is how long decisions are kept for repeats of a command.
const DecisionRetention = 7 * 24 * time.Hour
