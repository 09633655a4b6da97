package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/wait"
)

// WaitApplied polls until consumer has applied, on topic, every offset in
// last (the highest offset a producer got acknowledged, per partition), or
// ctx ends. It is how a writer reads its own writes back from a read model.
func WaitApplied(ctx context.Context, pool *pgxpool.Pool, consumer, topic string, last map[int32]int64) error {
	next := make(map[int32]int64, len(last))
	for p, off := range last {
		next[p] = off + 1
	}
	// Nothing announces a stage's progress, so the wait polls: it is how
	// podctl and the tests wait, and a create an earlier attempt may have
	// sent (order.Bus.DecisionOnceRead), never an order's hot path.
	err := wait.Until[struct{}](ctx, nil, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		stored, err := Offsets(ctx, pool, consumer, topic)
		return err == nil && Reached(stored, next), err
	})
	if err != nil {
		return fmt.Errorf("wait for %s: %w", consumer, err)
	}
	return nil
}

// Offsets are consumer's stored next offsets on topic, by partition.
func Offsets(ctx context.Context, q pg.Querier, consumer, topic string) (map[int32]int64, error) {
	rows, err := q.Query(ctx, `SELECT partition, next_offset FROM consumer_offsets WHERE consumer = $1 AND topic = $2`,
		consumer, topic)
	if err != nil {
		return nil, fmt.Errorf("read the offsets of %s: %w", consumer, err)
	}
	out := map[int32]int64{}
	var part int32
	var next int64
	_, err = pgx.ForEachRow(rows, []any{&part, &next}, func() error {
		out[part] = next
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the offsets of %s: %w", consumer, err)
	}
	return out, nil
}

// Reached reports whether the next offsets have are at or past want's on
// every partition of want (a partition without an offset is at 0).
func Reached(have, want map[int32]int64) bool {
	for part, off := range want {
		if have[part] < off {
			return false
		}
	}
	return true
}
