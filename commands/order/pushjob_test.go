package order

import (
	"testing"
	"time"

	"github.com/printpod/pod/internal/jobs"
)

// TestPushJobFollowsTheOrder decides a command on an order and checks what
// becomes of the order's push job: its step, attempt and due time.
func TestPushJobFollowsTheOrder(t *testing.T) {
	delays := []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute}
	create := cmd(KindCreate)
	started := []Command{create, cmd(KindStartPush)}
	failed := append(append([]Command{}, started...), cmd(KindFailPush, attempt(1)))
	exhausted := append([]Command{}, failed...)
	for i := range MaxAutoRetries {
		exhausted = append(exhausted, cmd(KindAutoRetry, attempt(i+1)), cmd(KindStartPush), cmd(KindFailPush, attempt(i+2)))
	}
	const now = time.Hour // after t0, when the command is decided
	const kept = "(kept)"

	for _, tc := range []struct {
		name    string
		given   []Command
		when    Command
		step    string        // "" when the job is dropped, kept when left as it was
		attempt int           //
		due     time.Duration // after t0; -1 for parked
	}{
		{"a created order's push starts at once", nil, create, StepStart, 1, now},
		{"a started push's job stays leased to the worker that makes the call", []Command{create}, cmd(KindStartPush), kept, 0, 0},
		{"a pushed order's job is dropped", started, cmd(KindCompletePush, attempt(1)), "", 0, 0},
		{"a failed push is retried after the first delay", started, cmd(KindFailPush, attempt(1)), StepAutoRetry, 1, now + delays[0]},
		{"an automatic retry starts the next attempt at once", failed, cmd(KindAutoRetry, attempt(1)), StepStart, 2, now},
		{"a manual retry starts the next attempt at once", failed, cmd(KindRetry), StepStart, 2, now},
		{"a push failed after every automatic retry is parked", exhausted[:len(exhausted)-1], exhausted[len(exhausted)-1], StepParked, MaxAutoRetries + 1, -1},
		{"a cancelled order's job is dropped", []Command{create}, cmd(KindCancel), "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s State
			if len(tc.given) > 0 {
				s = given(t, tc.given)
			}
			at := t0.Add(now)
			evs, err := Decide(s, tc.when, at)
			if err != nil {
				t.Fatalf("%s refused: %v", tc.when.Kind, err)
			}
			o := &orderRow{state: s}
			for _, ev := range evs {
				o.state = Evolve(o.state, ev)
				if err := o.pushEffect(ev, tc.when.Details, delays); err != nil {
					t.Fatal(err)
				}
			}
			if tc.step == kept {
				if o.dropJob || o.job != nil {
					t.Fatalf("job changed (put %+v, dropped %v), want it left as it was", o.job, o.dropJob)
				}
				return
			}
			if tc.step == "" {
				if !o.dropJob || o.job != nil {
					t.Fatalf("job kept (%+v), want it dropped", o.job)
				}
				return
			}
			if o.job == nil {
				t.Fatalf("no job put, want step %s", tc.step)
			}
			want := t0.Add(tc.due)
			if tc.due < 0 {
				want = jobs.Parked
			}
			if j := o.job; j.Step != tc.step || j.Attempt != tc.attempt || !j.DueAt.Equal(want) {
				t.Fatalf("job at step %s, attempt %d, due %s; want %s, %d, %s", j.Step, j.Attempt, j.DueAt, tc.step, tc.attempt, want)
			}
		})
	}
}
