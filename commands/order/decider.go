package order

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
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
const DeciderName = "order-decider"

// NotifyDecided is the Postgres channel a decision is announced on (payload:
// the command id).
const NotifyDecided = "order_decided"

// Decisions is the decider's decision table.
var Decisions = pg.Decisions{Table: "order_decisions", Notify: NotifyDecided}

// Decision is the outcome of one command.
type Decision struct {
	CommandID uuid.UUID
	OrderID   uuid.UUID
	Code      string // "" when accepted; else an API error code
	Message   string
	Status    string // the order's status after the decision
	Version   int    // the order's version after the decision
}

// Accepted reports whether the command was applied.
func (d Decision) Accepted() bool { return d.Code == "" }

// Decider applies order commands: per batch, one transaction holds the
// consumed offsets, the orders' new state, the decisions and the outbox.
// Events are published after commit, in order per commands partition.
type Decider struct {
	Pool     *pgxpool.Pool
	Producer *kgo.Client
	Log      *slog.Logger
	Naming   schemas.Naming // topic names on the cluster
}

// Consumer is the decider's stream consumer.
func (d *Decider) Consumer() stream.Consumer {
	return stream.Consumer{
		Name:     DeciderName,
		Topics:   []string{d.Naming.Topic(schemas.TopicOrderCommands)},
		Handle:   d.handle,
		MaxBatch: 500,
		// Each partition's outbox is published in its own transaction under
		// its own offsets lock, so the partitions of a batch are published
		// at once rather than one after another (the consumer loop waits).
		AfterCommit: func(ctx context.Context, recs []*kgo.Record) {
			seen := map[int32]bool{}
			var wg sync.WaitGroup
			for _, r := range recs {
				if seen[r.Partition] {
					continue
				}
				seen[r.Partition] = true
				wg.Add(1)
				go func(p int32) {
					defer wg.Done()
					if err := d.flush(ctx, p); err != nil {
						d.Log.Warn("publishing order events failed; the relay retries", "partition", p, "err", err)
					}
				}(r.Partition)
			}
			wg.Wait()
		},
	}
}

type orderRow struct {
	state   State
	version int
	dirty   bool
}

type outboxRow struct {
	partition int32
	ev        schemas.Event
	orderID   uuid.UUID
	version   int
}

func (d *Decider) handle(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	cmds := make([]Command, 0, len(recs))
	parts := make([]int32, 0, len(recs))
	times := make([]time.Time, 0, len(recs))
	var cmdIDs, orderIDs []uuid.UUID
	for _, r := range recs {
		var c Command
		if err := json.Unmarshal(r.Value, &c); err != nil {
			// The runner dead-letters it; the rest go on.
			return stream.Poison(fmt.Errorf("order command %d/%d: %w", r.Partition, r.Offset, err))
		}
		if c.ID == uuid.Nil || c.OrderID == uuid.Nil {
			return stream.Poison(fmt.Errorf("order command %d/%d has no id or order id", r.Partition, r.Offset))
		}
		cmds = append(cmds, c)
		parts = append(parts, r.Partition)
		times = append(times, r.Timestamp)
		cmdIDs = append(cmdIDs, c.ID)
		orderIDs = append(orderIDs, c.OrderID)
	}
	if len(cmds) == 0 {
		return nil
	}
	decided, err := Decisions.Decided(ctx, tx, cmdIDs)
	if err != nil {
		return err
	}
	orders := map[uuid.UUID]*orderRow{}
	rows, err := tx.Query(ctx, `SELECT order_id, state, version FROM order_state WHERE order_id = ANY($1) FOR UPDATE`, orderIDs)
	if err != nil {
		return fmt.Errorf("load order state: %w", err)
	}
	var id uuid.UUID
	var raw []byte
	var version int
	if _, err := pgx.ForEachRow(rows, []any{&id, &raw, &version}, func() error {
		var s State
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("order %s state: %w", id, err)
		}
		orders[id] = &orderRow{state: s, version: version}
		return nil
	}); err != nil {
		return fmt.Errorf("load order state: %w", err)
	}

	var decisions []Decision
	var outbox []outboxRow
	for i, c := range cmds {
		if decided[c.ID] {
			continue // sent twice: the first decision stands
		}
		decided[c.ID] = true
		o := orders[c.OrderID]
		if o == nil {
			o = &orderRow{}
			orders[c.OrderID] = o
		}
		at := times[i]
		if at.IsZero() {
			at = time.Now()
		}
		evs, err := Decide(o.state, c, at)
		dec := Decision{CommandID: c.ID, OrderID: c.OrderID}
		if err != nil {
			dec.Code, dec.Message = ErrorCode(err), err.Error()
			if dec.Code == "" {
				d.Log.Warn("order command refused", "command", c.ID, "kind", c.Kind, "order", c.OrderID, "err", err)
				dec.Code = schemas.CodeValidation
			}
		}
		for _, ev := range evs {
			o.state = Evolve(o.state, ev)
			o.version++
			o.dirty = true
			outbox = append(outbox, outboxRow{partition: parts[i], ev: ev, orderID: c.OrderID, version: o.version})
		}
		dec.Status, dec.Version = o.state.Status, o.version
		decisions = append(decisions, dec)
	}

	batch := &pgx.Batch{}
	for oid, o := range orders {
		if !o.dirty {
			continue
		}
		raw, err := json.Marshal(o.state)
		if err != nil {
			return err
		}
		batch.Queue(`INSERT INTO order_state (order_id, account_id, state, version, updated_at) VALUES ($1, $2, $3, $4, now())
			ON CONFLICT (order_id) DO UPDATE SET state = excluded.state, version = excluded.version, updated_at = now()`,
			oid, o.state.Order.AccountID, raw, o.version)
	}
	for _, r := range outbox {
		value, err := json.Marshal(r.ev)
		if err != nil {
			return err
		}
		batch.Queue(`INSERT INTO order_outbox (partition, event_id, order_id, version, type, value) VALUES ($1, $2, $3, $4, $5, $6)`,
			r.partition, r.ev.ID, r.orderID, r.version, r.ev.Type, value)
	}
	var ids []string
	for _, dec := range decisions {
		batch.Queue(`INSERT INTO order_decisions (command_id, order_id, error_code, error_message, status, version)
			VALUES ($1, $2, NULLIF($3, ''), NULLIF($4, ''), NULLIF($5, ''), $6)`,
			dec.CommandID, dec.OrderID, dec.Code, dec.Message, dec.Status, dec.Version)
		ids = append(ids, dec.CommandID.String())
	}
	Decisions.QueueNotify(batch, ids)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("store decisions: %w", err)
	}
	return nil
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

// flush publishes the outbox rows of one commands partition in order, under
// that partition's offset row lock (so a decider batch and the relay never
// publish one partition's rows concurrently), then deletes them.
func (d *Decider) flush(ctx context.Context, partition int32) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for {
		n, err := d.flushSome(ctx, partition)
		if err != nil || n < outboxChunk {
			return err
		}
	}
}

const outboxChunk = 2000

func (d *Decider) flushSome(ctx context.Context, partition int32) (int, error) {
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT 1 FROM consumer_offsets WHERE consumer = $1 AND topic = $2 AND partition = $3 FOR UPDATE`,
		DeciderName, d.Naming.Topic(schemas.TopicOrderCommands), partition); err != nil {
		return 0, fmt.Errorf("lock partition %d: %w", partition, err)
	}
	rows, err := tx.Query(ctx, `SELECT seq, order_id, version, type, value FROM order_outbox
		WHERE partition = $1 ORDER BY seq LIMIT $2`, partition, outboxChunk)
	if err != nil {
		return 0, err
	}
	var recs []*kgo.Record
	var seqs []int64
	var seq int64
	var oid uuid.UUID
	var version int
	var typ string
	var value []byte
	if _, err := pgx.ForEachRow(rows, []any{&seq, &oid, &version, &typ, &value}, func() error {
		seqs = append(seqs, seq)
		recs = append(recs, &kgo.Record{
			Topic: d.Naming.Topic(schemas.TopicOrderEvents),
			Key:   []byte(oid.String()),
			Value: append([]byte(nil), value...),
			Headers: []kgo.RecordHeader{
				{Key: schemas.HeaderEventType, Value: []byte(typ)},
				{Key: schemas.HeaderOrderVersion, Value: []byte(strconv.Itoa(version))},
			},
		})
		return nil
	}); err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		return 0, nil
	}
	results := d.Producer.ProduceSync(ctx, recs...)
	// Delete what was published, except events of an order behind one of
	// its own that failed: they are published again after it, in order
	// (a repeat keeps its id, so consumers dedupe).
	failed := map[string]bool{}
	var done []int64
	var firstErr error
	for i, r := range results {
		key := string(recs[i].Key)
		if r.Err != nil || failed[key] {
			failed[key] = true
			if firstErr == nil && r.Err != nil {
				firstErr = r.Err
			}
			continue
		}
		done = append(done, seqs[i])
	}
	if len(done) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM order_outbox WHERE seq = ANY($1)`, done); err != nil {
			return 0, err
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, err
		}
	}
	if firstErr != nil {
		return 0, fmt.Errorf("publish order events: %w", firstErr)
	}
	return len(recs), nil
}

// DecisionRetention is how long decisions are kept: long enough for every
// redo (a batch item, a push job, the 24 h soft duplicate window) to find
// the first decision of its command.
const DecisionRetention = 7 * 24 * time.Hour

// Relay publishes outbox rows left behind (a crash between commit and
// publish, or Kafka away at the time) until ctx ends. It also drops
// decisions older than DecisionRetention, hourly.
func (d *Decider) Relay(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var pruned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(pruned) > time.Hour {
			pruned = time.Now()
			if err := Decisions.Prune(ctx, d.Pool, DecisionRetention); err != nil && ctx.Err() == nil {
				d.Log.Warn("pruning old decisions failed", "err", err)
			}
		}
		rows, err := d.Pool.Query(ctx, `SELECT DISTINCT partition FROM order_outbox`)
		if err != nil {
			continue
		}
		parts, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			continue
		}
		for _, p := range parts {
			if err := d.flush(ctx, p); err != nil && ctx.Err() == nil {
				d.Log.Warn("outbox relay failed", "partition", p, "err", err)
			}
		}
	}
}

// LoadDecision reads a command's decision; ok is false while undecided.
func LoadDecision(ctx context.Context, q *pgxpool.Pool, commandID uuid.UUID) (d Decision, ok bool, err error) {
	var code, msg, status *string
	err = q.QueryRow(ctx, `SELECT order_id, error_code, error_message, status, version FROM order_decisions WHERE command_id = $1`,
		commandID).Scan(&d.OrderID, &code, &msg, &status, &d.Version)
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
	return s, true, json.Unmarshal(raw, &s)
}
