package delivery

import (
	"context"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/printpod/pod/internal/pgtest"
)

// TestTheSweepReadsOnlyWhatItRemoves: once the sweep has run and vacuum
// has let new deliveries fill the pages it emptied, old and new rows share
// pages. A later sweep still reads only the few rows it removes, not every
// page that once held an old row.
func TestTheSweepReadsOnlyWhatItRemoves(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const retention = 30 * 24 * time.Hour
	fill := func(n int, age time.Duration) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id, topic, status, gen, created_at)
			SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'order.created', 'success', 1, now() - $2::interval
			FROM generate_series(1, $1)`, n, age.String()); err != nil {
			t.Fatal(err)
		}
	}
	fill(50_000, retention+10*24*time.Hour)
	if n, err := Sweep(ctx, pool, retention); err != nil || n != 50_000 {
		t.Fatalf("first sweep removed %d (%v), want 50000", n, err)
	}
	if _, err := pool.Exec(ctx, `VACUUM webhook_deliveries`); err != nil {
		t.Fatal(err)
	}
	fill(50_000, 0)
	fill(100, retention+time.Hour)
	if _, err := pool.Exec(ctx, `ANALYZE webhook_deliveries`); err != nil {
		t.Fatal(err)
	}

	var pages int64
	if err := pool.QueryRow(ctx, `SELECT pg_relation_size('webhook_deliveries') / current_setting('block_size')::int`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var raw []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+sweepChunk, retention.String()).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", raw, err)
	}
	if blocks := plan[0].Plan.Hit + plan[0].Plan.Read; blocks > 3*100 {
		t.Fatalf("removing 100 rows read %d blocks (the table has %d pages); want at most 3 a row:\n%s", blocks, pages, raw)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := Sweep(ctx, pool, retention); err != nil || n != 100 {
		t.Fatalf("second sweep removed %d (%v), want the 100 old ones", n, err)
	}
}

// TestTheSweepKeepsADeliveryWhoseRunIsUnderWay: a delivery older than the
// retention but pending (resent near its end) is kept until its run ends
// (found by review: its next result made the row again, with no payload
// and a wrong attempt count); one pending with no change for two days (its
// outcome never recorded) goes all the same.
func TestTheSweepKeepsADeliveryWhoseRunIsUnderWay(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const retention = 30 * 24 * time.Hour
	for _, row := range []struct {
		status  string
		changed time.Duration // how long ago the row last changed
	}{{"success", 0}, {"failed", 0}, {"cancelled", 0}, {"pending", time.Hour}, {"pending", 3 * 24 * time.Hour}} {
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id, topic, status, gen, created_at, updated_at)
			VALUES (gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'order.created', $1, 1, now() - $2::interval, now() - $3::interval)`,
			row.status, (retention + time.Hour).String(), row.changed.String()); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := Sweep(ctx, pool, retention); err != nil || n != 4 {
		t.Fatalf("the sweep removed %d (%v), want the 3 finished and the one pending untouched for 3 days", n, err)
	}
	var left string
	if err := pool.QueryRow(ctx, `SELECT string_agg(status, ',') FROM webhook_deliveries WHERE updated_at > now() - interval '2 hours'`).Scan(&left); err != nil || left != "pending" {
		t.Fatalf("left %q (%v), want the pending one changed an hour ago", left, err)
	}
}
