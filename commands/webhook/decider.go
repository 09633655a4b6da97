package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/decider"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/secretbox"
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
	// Box, when set, is this podsvc's key ring: a reseal whose new
	// sealing it cannot open to the secret it replaces is refused.
	Box *secretbox.Box
}

// Consumer is the decider's stream consumer.
func (d *Decider) Consumer() stream.Consumer {
	rt := decider.Runtime[Command, *clientHooks, Decision]{Model: d, Decisions: Decisions}
	return stream.Consumer{Name: DeciderName, Topics: []string{d.Naming.Topic(schemas.TopicWebhookCommands)},
		Handle: rt.Handle, OnDeadLetter: rt.DeadLettered, MaxBatch: 500}
}

// RefusedDeadLettered says whether a command of kind is refused for good
// when its record is dead-lettered (Decider.Refuse): a client's change.
func RefusedDeadLettered(kind string) bool {
	switch kind {
	case KindCreate, KindUpdate, KindDelete, KindRotate:
		return true
	}
	return false
}

// Refuse refuses a client's change whose record was dead-lettered
// (decider.Refuser): the request that sent it, waiting, is answered that
// it was not applied, rather than told it will be (found by review: a 503
// said so, and a repeat sent the command to be dead-lettered again). An
// automatic disable or a reseal is left to a replay of the dead letter:
// its id derives from what it is about, so its next sending would find a
// refusal and never apply.
func (d *Decider) Refuse(c Command, cause error) (Decision, bool) {
	if !RefusedDeadLettered(c.Kind) {
		return Decision{}, false
	}
	return Decision{CommandID: c.ID, WebhookID: c.WebhookID, Code: schemas.CodeInternal,
		Message:   "the webhook change was not applied: the service could not apply it (an internal error, logged)",
		DecidedAt: time.Now().UTC().Truncate(time.Microsecond)}, true
}

const webhookColumns = `id, account_id, url, description, topics, is_active, disabled_reason, gen, secret,
	previous_secret, previous_secret_until, created_at, updated_at`

func scanWebhook(row pgx.Row) (*Webhook, error) {
	var w Webhook
	err := row.Scan(&w.ID, &w.AccountID, &w.URL, &w.Description, &w.Topics, &w.IsActive, &w.DisabledReason, &w.Gen,
		&w.Secret, &w.PreviousSecret, &w.PreviousSecretUntil, &w.CreatedAt, &w.UpdatedAt)
	return &w, err
}

// clientHooks are a client's webhooks in the decider (every one: the limit
// counts them), with the ones the batch changed or deleted.
type clientHooks struct {
	hooks   map[uuid.UUID]*Webhook
	changed map[uuid.UUID]bool
}

func newClientHooks() *clientHooks {
	return &clientHooks{hooks: map[uuid.UUID]*Webhook{}, changed: map[uuid.UUID]bool{}}
}

// Parse reads a command record; one without ids cannot be decided
// (decider.Model).
func (d *Decider) Parse(r *kgo.Record) (Command, error) {
	var c Command
	if err := codec.Unmarshal(r.Value, &c); err != nil {
		return c, err
	}
	if c.ID == uuid.Nil || c.AccountID == uuid.Nil {
		return c, errors.New("no command id or account id")
	}
	return c, nil
}

// IDs are the command's id and its client's (decider.Model).
func (d *Decider) IDs(c Command) (uuid.UUID, uuid.UUID) { return c.ID, c.AccountID }

// QueueLoad reads the webhooks of the clients, locked (decider.Model).
func (d *Decider) QueueLoad(b *pgx.Batch, accounts []uuid.UUID, states map[uuid.UUID]*clientHooks) {
	b.Queue(`SELECT `+webhookColumns+` FROM webhooks WHERE account_id = ANY($1) FOR UPDATE`, accounts).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				w, err := scanWebhook(rows)
				if err != nil {
					return fmt.Errorf("load webhooks: %w", err)
				}
				if states[w.AccountID] == nil {
					states[w.AccountID] = newClientHooks()
				}
				states[w.AccountID].hooks[w.ID] = w
			}
			return rows.Err()
		})
}

// Decide decides one command against its client's webhooks
// (decider.Model).
func (d *Decider) Decide(h *clientHooks, c Command, at time.Time) (decider.Outcome[*clientHooks, Decision], error) {
	if h == nil {
		h = newClientHooks()
	}
	// Stored and announced alike, so a waiter reading either sees the same.
	out := decider.Outcome[*clientHooks, Decision]{State: h,
		Decision: Decision{CommandID: c.ID, WebhookID: c.WebhookID, DecidedAt: at.UTC().Truncate(time.Microsecond)}}
	err := d.checkReseal(c)
	var ch Change
	if err == nil {
		ch, err = Decide(h.hooks, c, at)
	}
	switch {
	case errors.Is(err, ErrNotFound):
		out.Decision.Code, out.Decision.Message = schemas.CodeNotFound, "webhook not found"
	case errors.Is(err, ErrLimitReached):
		out.Decision.Code, out.Decision.Message = schemas.CodeWebhookLimitReached,
			fmt.Sprintf("this client already has %d webhooks; delete one first", MaxPerClient)
	case err != nil:
		d.Log.Warn("webhook command refused", "command", c.ID, "kind", c.Kind, "err", err)
		out.Decision.Code, out.Decision.Message = schemas.CodeValidation, err.Error()
	}
	if err != nil || ch.EventType == "" && ch.Webhook == nil {
		return out, nil // refused, or nothing changed
	}
	fact := schemas.WebhookFact{ID: c.WebhookID, AccountID: c.AccountID, UpdatedAt: at.UTC()}
	if ch.Webhook != nil {
		h.hooks[ch.Webhook.ID] = ch.Webhook
		fact = ch.Webhook.Fact()
	} else {
		delete(h.hooks, c.WebhookID)
	}
	h.changed[c.WebhookID] = true
	out.Changed = true
	if ch.EventType == "" {
		return out, nil // a change no client sees (a reseal): saved, not announced
	}
	ev, err := schemas.NewEventWithID(uuid.NewSHA1(c.ID, []byte("event")), ch.EventType, at, fact)
	if err != nil {
		return out, err
	}
	value, err := codec.Marshal(ev)
	if err != nil {
		return out, err
	}
	out.Events = []*kgo.Record{{Topic: d.Naming.Topic(schemas.TopicWebhookEvents), Key: []byte(c.AccountID.String()), Value: value,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderEventType, Value: []byte(ch.EventType)}}}}
	return out, nil
}

// checkReseal refuses a reseal whose new sealing this podsvc cannot open,
// or opens to another secret than the one it replaces: sealed with a key
// list the service does not run with yet, it would leave every delivery
// unsigned.
func (d *Decider) checkReseal(c Command) error {
	if c.Kind != KindReseal || d.Box == nil {
		return nil
	}
	for _, pair := range [][2]string{{c.Secret, c.OldSecret}, {c.PreviousSecret, c.OldPreviousSecret}} {
		if pair[0] == "" {
			continue
		}
		plain, err := d.Box.Open(pair[0])
		if err != nil {
			return errors.New("the new sealing does not open with the keys this podsvc runs with (POD_WEBHOOK_SECRET_KEY): " +
				"restart every podsvc with the new key first")
		}
		if was, err := d.Box.Open(pair[1]); err == nil && was != plain {
			return errors.New("the new sealing holds another secret than the one it replaces")
		}
	}
	return nil
}

// QueueSave writes the changed webhooks, the deleted ones and the
// decisions, one statement each (decider.Model).
func (d *Decider) QueueSave(b *pgx.Batch, changed map[uuid.UUID]*clientHooks, decisions []Decision) error {
	var upserts []Webhook
	var deleted []uuid.UUID
	for _, h := range changed {
		for id := range h.changed {
			w := h.hooks[id]
			if w == nil {
				deleted = append(deleted, id)
				continue
			}
			row := *w
			if row.Topics == nil {
				row.Topics = []string{} // a NULL would break the column's NOT NULL
			}
			upserts = append(upserts, row)
		}
	}
	if len(upserts) > 0 {
		rows, err := codec.Marshal(upserts)
		if err != nil {
			return err
		}
		b.Queue(`INSERT INTO webhooks (`+webhookColumns+`) SELECT `+webhookColumns+`
			FROM jsonb_populate_recordset(NULL::webhooks, $1::jsonb)
			ON CONFLICT (id) DO UPDATE SET url = excluded.url, description = excluded.description, topics = excluded.topics,
			is_active = excluded.is_active, disabled_reason = excluded.disabled_reason, gen = excluded.gen,
			secret = excluded.secret, previous_secret = excluded.previous_secret,
			previous_secret_until = excluded.previous_secret_until, updated_at = excluded.updated_at`, rows)
	}
	if len(deleted) > 0 {
		b.Queue(`DELETE FROM webhooks WHERE id = ANY($1)`, deleted)
	}
	if len(decisions) > 0 {
		n := len(decisions)
		ids, hooks, codes, msgs, at := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]string, n), make([]string, n), make([]time.Time, n)
		for i, dec := range decisions {
			ids[i], hooks[i], codes[i], msgs[i], at[i] = dec.CommandID, dec.WebhookID, dec.Code, dec.Message, dec.DecidedAt
		}
		b.Queue(`INSERT INTO webhook_decisions (command_id, webhook_id, error_code, error_message, decided_at)
			SELECT id, hook, NULLIF(code, ''), NULLIF(msg, ''), at
			FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::timestamptz[]) AS d(id, hook, code, msg, at)`,
			ids, hooks, codes, msgs, at)
	}
	return nil
}

// Decision is the outcome of one webhook command. The json names are
// those of its announcement.
type Decision struct {
	CommandID uuid.UUID `json:"-"`
	WebhookID uuid.UUID `json:"-"`
	Code      string    `json:"e,omitempty"` // "" when accepted
	Message   string    `json:"m,omitempty"`
	DecidedAt time.Time `json:"t"`
}

// parseDecision reads a decision from its announcement.
func parseDecision(v string) (Decision, bool) {
	var d Decision
	if err := codec.Unmarshal([]byte(v), &d); err != nil || d.DecidedAt.IsZero() {
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
	return collectWebhooks(pool.Query(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE account_id = $1
		AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3)) ORDER BY created_at DESC, id DESC LIMIT $4`,
		account, after, afterID, limit))
}

// Page reads every client's webhooks with an id above after, by id, up to
// limit: an operator's walk over all of them (podctl webhooks reseal).
func Page(ctx context.Context, pool *pgxpool.Pool, after uuid.UUID, limit int) ([]*Webhook, error) {
	return collectWebhooks(pool.Query(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE id > $1 ORDER BY id LIMIT $2`, after, limit))
}

// Get reads a webhook by id alone, whatever its account (nil when it does
// not exist): for operator tasks, never for a client's request.
func Get(ctx context.Context, pool *pgxpool.Pool, id uuid.UUID) (*Webhook, error) {
	w, err := scanWebhook(pool.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return w, err
}

func collectWebhooks(rows pgx.Rows, err error) ([]*Webhook, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Webhook, error) { return scanWebhook(r) })
}

// DecisionRetention is how long decisions are kept for repeats of a command.
const DecisionRetention = 7 * 24 * time.Hour
