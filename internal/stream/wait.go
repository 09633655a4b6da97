package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WaitApplied polls until consumer has applied, on topic, every offset in
// last (the highest offset a producer got acknowledged, per partition), or
// ctx ends. It is how a writer reads its own writes back from a read model.
func WaitApplied(ctx context.Context, pool *pgxpool.Pool, consumer, topic string, last map[int32]int64) error {
	for {
		stored, err := loadOffsets(ctx, pool, consumer)
		if err == nil && passed(stored, topic, last) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", consumer, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func passed(stored map[tp]int64, topic string, last map[int32]int64) bool {
	for p, off := range last {
		if stored[tp{topic, p}] <= off {
			return false
		}
	}
	return true
}
