package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/wait"
)

// WaitApplied polls until consumer has applied, on topic, every offset in
// last (the highest offset a producer got acknowledged, per partition), or
// ctx ends. It is how a writer reads its own writes back from a read model.
func WaitApplied(ctx context.Context, pool *pgxpool.Pool, consumer, topic string, last map[int32]int64) error {
	// Nothing announces a stage's progress, so the wait polls: it is how
	// podctl and the tests wait, not a request path.
	err := wait.Until[struct{}](ctx, nil, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		stored, err := loadOffsets(ctx, pool, consumer)
		return err == nil && passed(stored, topic, last), err
	})
	if err != nil {
		return fmt.Errorf("wait for %s: %w", consumer, err)
	}
	return nil
}

func passed(stored map[tp]int64, topic string, last map[int32]int64) bool {
	for p, off := range last {
		if stored[tp{topic, p}] <= off {
			return false
		}
	}
	return true
}
