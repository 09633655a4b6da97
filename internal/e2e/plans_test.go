package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/printpod/pod/internal/testenv"
)

// largeTables are the tables the pipeline writes that grow with every
// order: none may be read by a sequential scan on an order's path.
var largeTables = []string{"orders", "order_state", "order_decisions", "order_push_attempts", "webhook_deliveries", "jobs"}

// TestOrderPathNeverScansLargeTables: with 100,000 rows already in each
// table an order's path writes (a service some months old), orders created,
// pushed and delivered to a webhook read those tables through indexes
// only: no statement of a create, a stage or the push worker turns into a
// sequential scan as the tables grow.
func TestOrderPathNeverScansLargeTables(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, fastPushes, allow(rc))
	w := createWebhook(t, d.client, rc.url("/hooks"))
	rc.setSecret(w.Secret)
	v := d.variant(t, "ACTIVE", "tshirt")
	// Orders end to end first, one at a time, so every stage has run each
	// of its statements more than five times (when Postgres may settle on a
	// generic plan) while the tables were small.
	const warm = 8
	for i := range warm {
		create(t, d.client, tshirtOrder(v.VariantID, fmt.Sprintf("plans-warm-%d", i), 1))
		waitRequests(t, rc, 3*(i+1))
	}

	fillLargeTables(t, d, 100_000)
	before := settledSeqScans(t, d)
	const orders = 40
	var wg sync.WaitGroup
	for i := range orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			create(t, d.client, tshirtOrder(v.VariantID, fmt.Sprintf("plans-%d", i), 1))
		}()
	}
	wg.Wait()
	// created, PROCESSING and SUCCESS of each, and of the first ones
	waitRequests(t, rc, 3*(orders+warm))
	after := settledSeqScans(t, d)
	for _, table := range largeTables {
		if n := after[table] - before[table]; n != 0 {
			t.Errorf("%s was read by %d sequential scans while %d orders were pushed and delivered", table, n, orders)
		}
	}
}

func waitRequests(t *testing.T, rc *receiver, n int) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() error {
		if got := len(rc.requests()); got < n {
			return fmt.Errorf("%d webhook requests, want %d", got, n)
		}
		return nil
	})
}

// fillLargeTables adds n rows to each of largeTables, of orders of another
// account (push jobs parked, as failed orders' are).
func fillLargeTables(t *testing.T, d demoEnv, n int) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO orders (order_id, account_id, store_id, reference_id, status, duplicate, pricing, created_via,
			shipping_service, line_items, idempotency_key, queued_at, created_at, updated_at, version)
			SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'filler-' || g, 'SUCCESS', false, '{}', 'api',
			'eco', '[]', gen_random_uuid(), now(), now(), now(), 3 FROM generate_series(1, $1) g`,
		`INSERT INTO order_push_attempts (order_id, attempt, started_at, finished_at, outcome)
			SELECT order_id, 1, now(), now(), 'success' FROM orders WHERE reference_id LIKE 'filler-%'`,
		`INSERT INTO order_state (order_id, account_id, state, version)
			SELECT gen_random_uuid(), gen_random_uuid(), '{"exists": true, "status": "SUCCESS"}', 3 FROM generate_series(1, $1)`,
		`INSERT INTO order_decisions (command_id, order_id, status, version)
			SELECT gen_random_uuid(), gen_random_uuid(), 'SUCCESS', 3 FROM generate_series(1, $1)`,
		`INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id, topic, status, gen, created_at)
			SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'order.created', 'success', 1, now()
			FROM generate_series(1, $1)`,
		`INSERT INTO jobs (queue, id, step, attempt, due_at)
			SELECT 'push', gen_random_uuid(), 'parked', 1, '9999-01-01' FROM generate_series(1, $1)`,
	} {
		var args []any
		if !containsNoArgs(q) {
			args = []any{n}
		}
		if _, err := d.app.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("fill: %v\n%s", err, q)
		}
	}
	// Vacuum the filled tables now, as a service that old has been. Left
	// to autovacuum, the vacuum of webhook_deliveries could fall inside the
	// measured window, where summarizing its BRIN index counts as one
	// sequential scan per range of pages (14 for 100,000 rows): no
	// statement of the order's path, but the same counter.
	if _, err := d.app.Pool.Exec(ctx, "VACUUM "+strings.Join(largeTables, ", ")); err != nil {
		t.Fatalf("vacuum: %v", err)
	}
}

func containsNoArgs(q string) bool {
	for i := 0; i+1 < len(q); i++ {
		if q[i] == '$' {
			return false
		}
	}
	return true
}

// settledSeqScans reads the sequential scans of largeTables once every
// backend has reported its counts: a backend reports at the end of a
// transaction at most once a second, and what it still holds when it goes
// idle within 10 s (Postgres's idle report interval), so the counts are
// settled once they have not moved for longer than that.
const statsSettle = 11 * time.Second

func settledSeqScans(t *testing.T, d demoEnv) map[string]int64 {
	t.Helper()
	read := func() map[string]int64 {
		rows, err := d.app.Pool.Query(context.Background(), `SELECT relname, seq_scan FROM pg_stat_user_tables WHERE relname = ANY($1)`, largeTables)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for rows.Next() {
			var name string
			var n int64
			if err := rows.Scan(&name, &n); err != nil {
				t.Fatal(err)
			}
			out[name] = n
		}
		return out
	}
	last, since := read(), time.Now()
	testenv.Eventually(t, 60*time.Second, func() error {
		if now := read(); !maps.Equal(now, last) {
			last, since = now, time.Now()
		}
		if time.Since(since) < statsSettle {
			return fmt.Errorf("scan counts moved within the last %s", statsSettle)
		}
		return nil
	})
	return last
}
