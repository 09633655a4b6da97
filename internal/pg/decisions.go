package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Decisions are what the deciders share about their decision tables (one
// row per command id, with a decided_at): which commands of a batch were
// decided already, announcing new decisions, and dropping old ones.
type Decisions struct {
	Table  string // e.g. order_decisions
	Notify string // the channel a decision is announced on (payload: command id)
}

// QueueDecided queues on b the lookup of which of ids have a decision,
// marking them in decided when b runs, in the round trip that reads the
// rest of the batch's state.
func (d Decisions) QueueDecided(b *pgx.Batch, ids []uuid.UUID, decided map[uuid.UUID]bool) {
	// One index probe per id (the LIMIT keeps the planner from turning the
	// probes into a join): a batch of new commands reads nothing, however
	// the table's size compares with the batch's.
	b.Queue(`SELECT d.command_id FROM unnest($1::uuid[]) AS c(id)
		CROSS JOIN LATERAL (SELECT command_id FROM `+pgx.Identifier{d.Table}.Sanitize()+` WHERE command_id = c.id LIMIT 1) d`, ids).
		Query(func(rows pgx.Rows) error {
			var id uuid.UUID
			if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { decided[id] = true; return nil }); err != nil {
				return fmt.Errorf("load decisions: %w", err)
			}
			return nil
		})
}

// MaxAnnounced bounds a decision announced with its content: Postgres
// takes payloads under 8000 bytes. A longer one is announced by id alone
// and its waiter reads the table.
const MaxAnnounced = 7000

// QueueAnnounce queues on b the announcement of the decisions of ids,
// each with its value (the decision, encoded by the decider; "" for none),
// sent when the transaction commits, in one statement.
func (d Decisions) QueueAnnounce(b *pgx.Batch, ids, values []string) {
	if len(ids) == 0 {
		return
	}
	for i, v := range values {
		if len(v) > MaxAnnounced {
			values[i] = ""
		}
	}
	b.Queue(`SELECT pg_notify($1, CASE WHEN v = '' THEN id ELSE id || ' ' || v END)
		FROM unnest($2::text[], $3::text[]) AS a(id, v)`, d.Notify, ids, values)
}

// Prune drops decisions older than keep, PruneRun at a time, oldest
// first. Each run commits on its own (found by review: one statement over
// an hour's worth at 1,000 orders/s, millions of rows, held its locks and
// its snapshot for as long, and widened the moment in which a command
// sent again finds its decision, skips deciding it, and sees it deleted
// before its waiter reads it; the retention keeps that moment rare).
func (d Decisions) Prune(ctx context.Context, pool *pgxpool.Pool, keep time.Duration) error {
	table := pgx.Identifier{d.Table}.Sanitize()
	for {
		tag, err := pool.Exec(ctx, `DELETE FROM `+table+` WHERE command_id IN (
			SELECT command_id FROM `+table+` WHERE decided_at < now() - $1::interval ORDER BY decided_at LIMIT $2)`,
			keep.String(), PruneRun)
		if err != nil {
			return err
		}
		if tag.RowsAffected() < PruneRun {
			return nil
		}
	}
}

// PruneRun is how many decisions one statement of Prune deletes.
const PruneRun = 5000
