// Package decider is the one runtime of the service's deciders (orders and
// webhooks). A decider is a stream stage; per consumer batch the runtime
//
//  1. reads each record's command (a record it cannot read is poison, which
//     the stage runner dead-letters),
//  2. reads which of the batch's commands were decided before and the state
//     they decide on, locked, in one round trip,
//  3. decides each new command in order against the state in memory (a
//     pure function of the state, the command and the command record's
//     time),
//  4. writes the changed state and the decisions in one more round trip,
//     announcing each decision with its content once the batch commits, so
//     no waiter reads it back,
//
// and returns the events the decisions emitted, which the stage runner
// produces before it commits. A command sent twice finds its first
// decision, changes nothing, and is announced again.
package decider

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/stream"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Model is one decider's domain: its commands C, the state S a command is
// decided on (one value per key, e.g. an order, or a client's webhooks) and
// its decisions D, whose JSON is their announcement.
type Model[C, S, D any] interface {
	// Parse reads a command from its record.
	Parse(r *kgo.Record) (C, error)
	// IDs are the command's id and the key of the state it is decided on.
	IDs(c C) (command, key uuid.UUID)
	// QueueLoad queues on b the read, locked, of the keys' states into
	// states (a key with no state is left out).
	QueueLoad(b *pgx.Batch, keys []uuid.UUID, states map[uuid.UUID]S)
	// Decide decides c against s (S's zero value when the key has no
	// state yet) at time at, the command record's time.
	Decide(s S, c C, at time.Time) (Outcome[S, D], error)
	// QueueSave queues on b the writes of the changed states and of the
	// batch's decisions, each statement set-based.
	QueueSave(b *pgx.Batch, changed map[uuid.UUID]S, decisions []D) error
}

// Outcome is what deciding one command gives.
type Outcome[S, D any] struct {
	State    S
	Changed  bool // State is to be written
	Decision D
	Events   []*kgo.Record
}

// Runtime runs a Model as a stream handler.
type Runtime[C, S, D any] struct {
	Model     Model[C, S, D]
	Decisions pg.Decisions
}

// Handle is the stage's stream.Handler.
func (r Runtime[C, S, D]) Handle(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
	cmds := make([]C, 0, len(recs))
	cmdIDs := make([]uuid.UUID, 0, len(recs))
	keys := make([]uuid.UUID, 0, len(recs))
	for _, rec := range recs {
		c, err := r.Model.Parse(rec)
		if err != nil {
			return nil, poison(rec, err)
		}
		id, key := r.Model.IDs(c)
		cmds, cmdIDs, keys = append(cmds, c), append(cmdIDs, id), append(keys, key)
	}
	decided := map[uuid.UUID]bool{}
	states := make(map[uuid.UUID]S, len(keys))
	read := &pgx.Batch{}
	r.Decisions.QueueDecided(read, cmdIDs, decided)
	r.Model.QueueLoad(read, keys, states)
	if err := tx.SendBatch(ctx, read).Close(); err != nil {
		return nil, err
	}

	changed := map[uuid.UUID]S{}
	var decisions []D
	var ids, values []string
	var events []*kgo.Record
	seen := make(map[uuid.UUID]bool, len(cmds))
	for i, c := range cmds {
		if seen[cmdIDs[i]] {
			continue // twice in this batch: the first decision stands
		}
		seen[cmdIDs[i]] = true
		if decided[cmdIDs[i]] {
			// Sent again after an earlier batch decided it: the first
			// decision stands, and is announced again for whoever sent the
			// command again and waits (a push taken over), by id alone:
			// the waiter reads it from the table.
			ids, values = append(ids, cmdIDs[i].String()), append(values, "")
			continue
		}
		at := recs[i].Timestamp
		if at.IsZero() {
			at = time.Now()
		}
		out, err := r.Model.Decide(states[keys[i]], c, at)
		if err != nil {
			return nil, err
		}
		states[keys[i]] = out.State
		if out.Changed {
			changed[keys[i]] = out.State
		}
		value, err := codec.Marshal(out.Decision)
		if err != nil {
			return nil, err
		}
		decisions = append(decisions, out.Decision)
		ids, values = append(ids, cmdIDs[i].String()), append(values, string(value))
		events = append(events, out.Events...)
	}
	write := &pgx.Batch{}
	if err := r.Model.QueueSave(write, changed, decisions); err != nil {
		return nil, err
	}
	r.Decisions.QueueAnnounce(write, ids, values)
	if err := tx.SendBatch(ctx, write).Close(); err != nil {
		return nil, fmt.Errorf("store decisions: %w", err)
	}
	return events, nil
}

// Refuser is a Model that refuses, for good, some commands of records
// dead-lettered (those whose senders wait for an answer a replay would not
// give them in time).
type Refuser[C, D any] interface {
	// Refuse is c's decision once its record was dead-lettered for cause,
	// and whether c is refused at all.
	Refuse(c C, cause error) (D, bool)
}

// DeadLettered records the refusal of a dead-lettered record's command in
// tx (stream.Consumer.OnDeadLetter), when the Model refuses it (Refuser),
// and announces it: its sender (an API request, a batch item) learns the
// command failed instead of waiting for a decision that never comes, and
// a replay of the dead letter finds it decided. A record whose command
// cannot be read, or that was decided before, records nothing.
func (r Runtime[C, S, D]) DeadLettered(ctx context.Context, tx pgx.Tx, rec *kgo.Record, cause error) error {
	refuser, ok := any(r.Model).(Refuser[C, D])
	if !ok {
		return nil
	}
	c, err := r.Model.Parse(rec)
	if err != nil {
		return nil
	}
	d, ok := refuser.Refuse(c, cause)
	if !ok {
		return nil
	}
	id, _ := r.Model.IDs(c)
	decided := map[uuid.UUID]bool{}
	read := &pgx.Batch{}
	r.Decisions.QueueDecided(read, []uuid.UUID{id}, decided)
	if err := tx.SendBatch(ctx, read).Close(); err != nil || decided[id] {
		return err
	}
	value, err := codec.Marshal(d)
	if err != nil {
		return err
	}
	write := &pgx.Batch{}
	if err := r.Model.QueueSave(write, nil, []D{d}); err != nil {
		return err
	}
	r.Decisions.QueueAnnounce(write, []string{id.String()}, []string{string(value)})
	return tx.SendBatch(ctx, write).Close()
}

// poison marks a record whose command cannot be read: the runner
// dead-letters it and the rest of the batch goes on.
func poison(rec *kgo.Record, err error) error {
	return stream.Poison(fmt.Errorf("command %s %d/%d: %w", rec.Topic, rec.Partition, rec.Offset, err))
}
