// Package periodic runs background chores: once at once, then on every
// tick, until the context ends.
package periodic

import (
	"context"
	"time"
)

// Run calls f now and then every interval until ctx ends. A call is never
// started after ctx ended; one in progress is left to notice ctx itself.
func Run(ctx context.Context, interval time.Duration, f func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
