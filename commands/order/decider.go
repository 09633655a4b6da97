package order

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/decider"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DeciderName is the decider's consumer group and offsets key.
const DeciderName = "order-decider"

// NotifyDecided is the Postgres channel a decision is announced on (payload:
// the command id).
const NotifyDecided = "order_decided"

// Decisions is the decider's decision table.
var Decisions = pg.Decisions{Table: "order_decisions", Notify: NotifyDecided}

// Decision is the outcome of one command. The json names are those of its
// announcement (kept short: it rides in a NOTIFY payload).
type Decision struct {
	CommandID uuid.UUID `json:"c"`
	OrderID   uuid.UUID `json:"o"`
	Code      string    `json:"e,omitempty"` // "" when accepted; else an API error code
	Message   string    `json:"m,omitempty"`
	Status    string    `json:"s,omitempty"` // the order's status after the decision
	Version   int       `json:"v"`           // the order's version after the decision
	// Current is the order's version when the decision was read back from
	// the table (LoadDecision): above Version when later decisions moved
	// the order on. 0 when the decision came with its announcement.
	Current int `json:"-"`
}

// parseDecision reads a decision from its announcement.
func parseDecision(v string) (Decision, bool) {
	var d Decision
	if err := codec.Unmarshal([]byte(v), &d); err != nil || d.CommandID == uuid.Nil {
		return Decision{}, false
	}
	return d, true
}

// Accepted reports whether the command was applied.
func (d Decision) Accepted() bool { return d.Code == "" }

// Decider applies order commands. Per batch one transaction holds the
// consumed offsets, the orders' new state, the decisions and the orders'
// push jobs; the handler returns the batch's events, which the stage runner
// produces before that transaction commits. Event ids derive from the
// command and the time from its record, so a batch redone after a crash
// emits the same events. The decider is the only writer of order state:
// push workers send it commands like every other client.
type Decider struct {
	Log    *slog.Logger
	Naming schemas.Naming // topic names on the cluster
	// RetryDelays are the waits before the automatic push retries.
	RetryDelays []time.Duration
}

// Consumer is the decider's stream consumer.
func (d *Decider) Consumer() stream.Consumer {
	rt := decider.Runtime[Command, *orderRow, Decision]{Model: d, Decisions: Decisions}
	return stream.Consumer{
		Name:         DeciderName,
		Topics:       []string{d.Naming.Topic(schemas.TopicOrderCommands)},
		Handle:       rt.Handle,
		OnDeadLetter: rt.DeadLettered,
		MaxBatch:     500,
	}
}

// Refuse refuses a create whose record was dead-lettered (decider.Refuser):
// the POST or batch item that sent it is answered that the order was not
// created, rather than waiting for a decision no replay would bring in
// time. Other commands are left to a replay of the dead letter, which
// applies them once their cause is fixed.
func (d *Decider) Refuse(c Command, cause error) (Decision, bool) {
	if c.Kind != KindCreate {
		return Decision{}, false
	}
	return Decision{CommandID: c.ID, OrderID: c.OrderID, Code: schemas.CodeInternal,
		Message: "the order was not created: the service could not apply it (an internal error, logged)"}, true
}

// orderRow is an order's state in the decider, with the change to its
// push job that the batch's decisions made.
type orderRow struct {
	state   State
	version int
	job     *jobs.Job // put, when set
	dropJob bool      // delete the job
}

// Parse reads a command record (decider.Model).
func (d *Decider) Parse(r *kgo.Record) (Command, error) {
	var c Command
	if err := codec.Unmarshal(r.Value, &c); err != nil {
		return c, err
	}
	if c.ID == uuid.Nil || c.OrderID == uuid.Nil {
		return c, errors.New("no command id or order id")
	}
	return c, nil
}

// IDs are the command's id and its order's (decider.Model).
func (d *Decider) IDs(c Command) (uuid.UUID, uuid.UUID) { return c.ID, c.OrderID }

// Decide decides one command against its order (decider.Model): Decide
// and Evolve, the events' records and the push job's next step.
func (d *Decider) Decide(o *orderRow, c Command, at time.Time) (decider.Outcome[*orderRow, Decision], error) {
	if o == nil {
		o = &orderRow{}
	}
	out := decider.Outcome[*orderRow, Decision]{State: o, Decision: Decision{CommandID: c.ID, OrderID: c.OrderID}}
	evs, err := Decide(o.state, c, at)
	if errors.Is(err, ErrHeld) {
		if o.state, err = Hold(o.state, c); err == nil {
			out.Changed = true
			out.Decision.Message = ErrHeld.Error()
		}
	}
	if err != nil {
		out.Decision.Code, out.Decision.Message = ErrorCode(err), err.Error()
		if out.Decision.Code == "" {
			d.Log.Warn("order command refused", "command", c.ID, "kind", c.Kind, "order", c.OrderID, "err", err)
			out.Decision.Code = schemas.CodeValidation
		}
	}
	if err := d.apply(o, &out, c, evs); err != nil {
		return out, err
	}
	// Updates held while the push was under way apply once it succeeded,
	// decided as they came at this command's time: a batch redone decides
	// them alike.
	before := len(o.state.Held)
	var held []Command
	o.state, held = Release(o.state)
	if dropped := before - len(held) - len(o.state.Held); dropped > 0 {
		out.Changed = true
		d.Log.Warn("order cancelled with fulfillment updates held; dropped", "order", c.OrderID, "updates", dropped)
	}
	for _, h := range held {
		evs, err := Decide(o.state, h, at)
		if err != nil {
			d.Log.Warn("held fulfillment update refused", "command", h.ID, "order", h.OrderID, "err", err)
			continue
		}
		if err := d.apply(o, &out, h, evs); err != nil {
			return out, err
		}
	}
	out.Decision.Status, out.Decision.Version = o.state.Status, o.version
	return out, nil
}

// apply evolves o by the events command c caused and adds their records
// to out, with their effect on the push job.
func (d *Decider) apply(o *orderRow, out *decider.Outcome[*orderRow, Decision], c Command, evs []schemas.Event) error {
	for _, ev := range evs {
		o.state = Evolve(o.state, ev)
		o.version++
		out.Changed = true
		rec, err := d.eventRecord(ev, c.OrderID, o.version)
		if err != nil {
			return err
		}
		out.Events = append(out.Events, rec)
		if err := o.pushEffect(ev, c.Details, d.RetryDelays); err != nil {
			return err
		}
	}
	return nil
}

// QueueSave writes the changed orders' state and push jobs and the
// decisions, one statement each (decider.Model).
func (d *Decider) QueueSave(b *pgx.Batch, changed map[uuid.UUID]*orderRow, decisions []Decision) error {
	if err := queueStates(b, changed); err != nil {
		return err
	}
	queueDecisions(b, decisions)
	pushJobs := jobs.NewWrites(PushQueue)
	for id, o := range changed {
		switch {
		case o.job != nil:
			pushJobs.Put(*o.job)
		case o.dropJob:
			pushJobs.Delete(id)
		}
	}
	pushJobs.Queue(b)
	return nil
}

// eventRecord is ev's pod.order.events record, keyed by its order's id,
// with its type and the order's version after it in headers.
func (d *Decider) eventRecord(ev schemas.Event, orderID uuid.UUID, version int) (*kgo.Record, error) {
	value, err := codec.Marshal(ev)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{
		Topic: d.Naming.Topic(schemas.TopicOrderEvents),
		Key:   []byte(orderID.String()),
		Value: value,
		Headers: []kgo.RecordHeader{
			{Key: schemas.HeaderEventType, Value: []byte(ev.Type)},
			{Key: schemas.HeaderOrderVersion, Value: []byte(strconv.Itoa(version))},
		},
	}, nil
}

// QueueLoad queues on b the read, locked, of the orders ids' state into
// orders (decider.Model).
func (d *Decider) QueueLoad(b *pgx.Batch, ids []uuid.UUID, orders map[uuid.UUID]*orderRow) {
	b.Queue(`SELECT order_id, state, version FROM order_state WHERE order_id = ANY($1) FOR UPDATE`, ids).
		Query(func(rows pgx.Rows) error {
			var id uuid.UUID
			var raw []byte
			var version int
			if _, err := pgx.ForEachRow(rows, []any{&id, &raw, &version}, func() error {
				var s State
				if err := codec.Unmarshal(raw, &s); err != nil {
					// No retry reads it: the runner narrows the batch down
					// to this order's command and dead-letters it, and the
					// other orders of the partition go on.
					return stream.Poison(fmt.Errorf("order %s state: %w", id, err))
				}
				orders[id] = &orderRow{state: s, version: version}
				return nil
			}); err != nil {
				return fmt.Errorf("load order state: %w", err)
			}
			return nil
		})
}

// queueStates writes the changed orders' state in one statement.
func queueStates(b *pgx.Batch, orders map[uuid.UUID]*orderRow) error {
	var ids, accounts []uuid.UUID
	var states [][]byte
	var versions []int32
	for id, o := range orders {
		raw, err := codec.Marshal(o.state)
		if err != nil {
			return err
		}
		ids = append(ids, id)
		accounts = append(accounts, o.state.Order.AccountID)
		states = append(states, raw)
		versions = append(versions, int32(o.version))
	}
	if len(ids) == 0 {
		return nil
	}
	b.Queue(`INSERT INTO order_state (order_id, account_id, state, version, updated_at)
		SELECT id, account, state, version, now() FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[], $4::int[]) AS s(id, account, state, version)
		ON CONFLICT (order_id) DO UPDATE SET state = excluded.state, version = excluded.version, updated_at = now()`,
		ids, accounts, states, versions)
	return nil
}

// queueDecisions records decisions in one statement (the runtime
// announces them).
func queueDecisions(b *pgx.Batch, decisions []Decision) {
	if len(decisions) == 0 {
		return
	}
	n := len(decisions)
	cmdIDs, orderIDs := make([]uuid.UUID, n), make([]uuid.UUID, n)
	codes, msgs, statuses := make([]string, n), make([]string, n), make([]string, n)
	versions := make([]int32, n)
	for i, dec := range decisions {
		cmdIDs[i], orderIDs[i] = dec.CommandID, dec.OrderID
		codes[i], msgs[i], statuses[i] = dec.Code, dec.Message, dec.Status
		versions[i] = int32(dec.Version)
	}
	b.Queue(`INSERT INTO order_decisions (command_id, order_id, error_code, error_message, status, version)
		SELECT id, order_id, NULLIF(code, ''), NULLIF(msg, ''), NULLIF(status, ''), version
		FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::int[]) AS d(id, order_id, code, msg, status, version)`,
		cmdIDs, orderIDs, codes, msgs, statuses, versions)
}

// ErrorCode maps a decision error to its API error code ("" when it is not
// one the API knows).
func ErrorCode(err error) string {
	switch {
	case errors.Is(err, ErrDuplicateReference):
		return schemas.CodeDuplicateReference
	case errors.Is(err, ErrNotFound):
		return schemas.CodeNotFound
	case errors.Is(err, ErrRetryLimit):
		return schemas.CodeRetryLimitReached
	case errors.Is(err, ErrInvalidState):
		return schemas.CodeInvalidOrderState
	}
	return ""
}

// DecisionRetention is how long decisions are kept: long enough for every
// redo (a batch item, a push job, the 24 h soft duplicate window) to find
// the first decision of its command.
const DecisionRetention = 7 * 24 * time.Hour

// LoadDecision reads a command's decision, with the order's version now;
// ok is false while undecided.
func LoadDecision(ctx context.Context, q *pgxpool.Pool, commandID uuid.UUID) (d Decision, ok bool, err error) {
	var code, msg, status *string
	err = q.QueryRow(ctx, `SELECT d.order_id, d.error_code, d.error_message, d.status, d.version, coalesce(s.version, 0)
		FROM order_decisions d LEFT JOIN order_state s ON s.order_id = d.order_id WHERE d.command_id = $1`,
		commandID).Scan(&d.OrderID, &code, &msg, &status, &d.Version, &d.Current)
	if errors.Is(err, pgx.ErrNoRows) {
		return Decision{}, false, nil
	}
	if err != nil {
		return Decision{}, false, err
	}
	d.CommandID = commandID
	if code != nil {
		d.Code = *code
	}
	if msg != nil {
		d.Message = *msg
	}
	if status != nil {
		d.Status = *status
	}
	return d, true, nil
}

// LoadState reads the decider's state of an order of the account; known is
// false when the decider has no such order for it.
func LoadState(ctx context.Context, pool *pgxpool.Pool, account, id uuid.UUID) (State, bool, error) {
	var raw []byte
	err := pool.QueryRow(ctx, `SELECT state FROM order_state WHERE order_id = $1 AND account_id = $2`, id, account).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	var s State
	return s, true, codec.Unmarshal(raw, &s)
}
