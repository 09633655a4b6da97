// Package wait is the service's one way of waiting for something another
// process or goroutine does: check, then sleep until woken or until the
// poll interval passes, and check again. What wakes a waiter depends on
// where the awaited thing lives (a Postgres NOTIFY through pgnotify, a
// Redis message); the loop is the same, so every wait shares its rules: a
// failed check is retried rather than ending the wait, the poll is only a
// safety net, and the caller's context bounds it. A wake may carry the
// awaited thing itself (an announcement with its content): UntilValue
// hands it to the check, which then needs no lookup.
package wait

import (
	"context"
	"time"
)

// Until returns once check reports done, checking first (unless
// checkFirst is false: then the first check waits for a wake or the poll),
// then again whenever wake delivers and at least every poll. A check that
// fails (a dependency blinked) counts as not done. It returns ctx's error
// when ctx ends first. wake may be nil: the wait then polls.
func Until[T any](ctx context.Context, wake <-chan T, poll time.Duration, checkFirst bool, check func(context.Context) (bool, error)) error {
	return UntilValue(ctx, wake, poll, checkFirst, func(ctx context.Context, _ T, _ bool) (bool, error) { return check(ctx) })
}

// UntilValue is Until whose check also gets what woke it: woken is true
// and v the value when a wake delivered it, false on the first check and
// on polls.
func UntilValue[T any](ctx context.Context, wake <-chan T, poll time.Duration, checkFirst bool,
	check func(ctx context.Context, v T, woken bool) (bool, error)) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	var v T
	woken := false
	for {
		if checkFirst {
			done, err := check(ctx, v, woken)
			if err != nil && ctx.Err() == nil {
				done = false
			}
			if done {
				return nil
			}
		}
		checkFirst = true
		var zero T
		v, woken = zero, false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case v = <-wake:
			woken = true
		case <-t.C:
		}
	}
}
