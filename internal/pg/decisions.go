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

// Decided returns which of ids have a decision.
func (d Decisions) Decided(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (map[uuid.UUID]bool, error) {
	rows, err := tx.Query(ctx, `SELECT command_id FROM `+pgx.Identifier{d.Table}.Sanitize()+` WHERE command_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("load decisions: %w", err)
	}
	decided := map[uuid.UUID]bool{}
	var id uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { decided[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("load decisions: %w", err)
	}
	return decided, nil
}

// QueueNotify queues the announcement of the decisions of ids on b (sent
// when the transaction commits).
func (d Decisions) QueueNotify(b *pgx.Batch, ids []string) {
	if len(ids) > 0 {
		b.Queue(`SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id`, d.Notify, ids)
	}
}

// Prune drops decisions older than keep.
func (d Decisions) Prune(ctx context.Context, pool *pgxpool.Pool, keep time.Duration) error {
	_, err := pool.Exec(ctx, `DELETE FROM `+pgx.Identifier{d.Table}.Sanitize()+` WHERE decided_at < now() - $1::interval`, keep.String())
	return err
}
