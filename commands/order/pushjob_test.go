package order

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/schemas"
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
	spent := append([]Command{}, exhausted...) // every manual retry too
	for i := range MaxManualRetries {
		spent = append(spent, cmd(KindRetry), cmd(KindStartPush), cmd(KindFailPush, attempt(MaxAutoRetries+2+i)))
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
		{"a push failed after a manual retry, with more left, is parked", spent[:len(exhausted)+2], spent[len(exhausted)+2], StepParked, MaxAutoRetries + 2, -1},
		{"a push failed after the last manual retry leaves no job", spent[:len(spent)-1], spent[len(spent)-1], "", 0, 0},
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

// TestMigration021DeletesOnlyTheJobsNoRetryCanUse: the jobs parked before
// the decider dropped spent ones are deleted when their order is FAILED
// with every manual retry used, and kept while one is left.
func TestMigration021DeletesOnlyTheJobsNoRetryCanUse(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	spent, left, pending := uuid.New(), uuid.New(), uuid.New()
	for _, o := range []struct {
		id      uuid.UUID
		status  string
		retries int
	}{{spent, schemas.StatusFailed, MaxManualRetries}, {left, schemas.StatusFailed, MaxManualRetries - 1}, {pending, schemas.StatusPending, MaxManualRetries}} {
		state := fmt.Sprintf(`{"exists": true, "status": %q, "manual_retries": %d}`, o.status, o.retries)
		if _, err := pool.Exec(ctx, `INSERT INTO order_state (order_id, account_id, state, version) VALUES ($1, $2, $3, 1)`,
			o.id, uuid.New(), state); err != nil {
			t.Fatal(err)
		}
		step := StepParked
		if o.status == schemas.StatusPending {
			step = StepStart
		}
		if _, err := pool.Exec(ctx, `INSERT INTO jobs (queue, id, step, attempt, due_at, payload) VALUES ($1, $2, $3, 1, $4, '{"order": {}}')`,
			PushQueue, o.id, step, jobs.Parked); err != nil {
			t.Fatal(err)
		}
	}
	migration, err := schemas.Migrations.ReadFile("migrations/021_spent_push_jobs.sql")
	if err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, string(migration))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[uuid.UUID]bool{spent: false, left: true, pending: true} {
		var kept bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = $1 AND id = $2)`, PushQueue, id).Scan(&kept); err != nil {
			t.Fatal(err)
		}
		if kept != want {
			t.Errorf("job of order %s kept %v, want %v", id, kept, want)
		}
	}
}
