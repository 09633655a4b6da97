package wait

import (
	"context"
	"errors"
	"testing"
	"time"
)

// hour is a poll that never comes within a test: only wakes move a wait.
const hour = time.Hour

func TestUntil(t *testing.T) {
	t.Run("a check already done ends the wait without a wake", func(t *testing.T) {
		calls := 0
		err := Until[struct{}](context.Background(), nil, hour, true, func(context.Context) (bool, error) { calls++; return true, nil })
		if err != nil || calls != 1 {
			t.Fatalf("err %v after %d checks, want nil after 1", err, calls)
		}
	})
	t.Run("each wake checks again until done", func(t *testing.T) {
		wake := make(chan struct{})
		calls := 0
		done := make(chan error, 1)
		go func() {
			done <- Until(context.Background(), wake, hour, true, func(context.Context) (bool, error) { calls++; return calls == 3, nil })
		}()
		wake <- struct{}{} // an unbuffered send returns once the waiter took it
		wake <- struct{}{}
		if err := <-done; err != nil || calls != 3 {
			t.Fatalf("err %v after %d checks, want nil after 3", err, calls)
		}
	})
	t.Run("a failed check is retried, not the end of the wait", func(t *testing.T) {
		wake := make(chan struct{})
		calls := 0
		done := make(chan error, 1)
		go func() {
			done <- Until(context.Background(), wake, hour, true, func(context.Context) (bool, error) {
				calls++
				if calls == 1 {
					return false, errors.New("connection refused")
				}
				return true, nil
			})
		}()
		wake <- struct{}{}
		if err := <-done; err != nil || calls != 2 {
			t.Fatalf("err %v after %d checks, want nil after 2", err, calls)
		}
	})
	t.Run("without checkFirst the first check waits for a wake", func(t *testing.T) {
		wake := make(chan struct{})
		checked := make(chan struct{}, 1)
		done := make(chan error, 1)
		go func() {
			done <- Until(context.Background(), wake, hour, false, func(context.Context) (bool, error) { checked <- struct{}{}; return true, nil })
		}()
		select {
		case <-checked:
			t.Fatal("checked before any wake")
		case wake <- struct{}{}:
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the poll checks when nothing wakes", func(t *testing.T) {
		calls := 0
		err := Until[struct{}](context.Background(), nil, time.Millisecond, true, func(context.Context) (bool, error) { calls++; return calls == 3, nil })
		if err != nil || calls != 3 {
			t.Fatalf("err %v after %d checks, want nil after 3", err, calls)
		}
	})
	t.Run("the context's end ends the wait with its error", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := Until[struct{}](ctx, nil, hour, true, func(context.Context) (bool, error) { return false, nil })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
}

func TestUntilValue(t *testing.T) {
	t.Run("a wake's value reaches the check, and only a wake's", func(t *testing.T) {
		wake := make(chan string)
		var seen []string
		done := make(chan error, 1)
		go func() {
			done <- UntilValue(context.Background(), wake, hour, true, func(_ context.Context, v string, woken bool) (bool, error) {
				if !woken {
					v = "(not woken)"
				}
				seen = append(seen, v)
				return v == "decided", nil
			})
		}()
		wake <- ""
		wake <- "decided"
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if want := []string{"(not woken)", "", "decided"}; len(seen) != 3 || seen[0] != want[0] || seen[1] != want[1] || seen[2] != want[2] {
			t.Fatalf("checks saw %q, want %q", seen, want)
		}
	})
}
