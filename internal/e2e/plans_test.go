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

// largeTables are the tables that grow with the service's clients, orders
// and deliveries: none may be read by a sequential scan on a request's or
// a stage's path.
var largeTables = []string{"orders", "order_state", "order_decisions", "order_push_attempts", "webhook_deliveries", "jobs",
	"webhooks", "webhook_decisions", "store_queues", "order_batches", "order_batch_items", "idempotency_seeds"}

// TestOrderPathNeverScansLargeTables: with 100,000 rows already in each
// large table (a service some months old), orders created one by one and
// in a batch, pushed and delivered to a webhook, a webhook created and
// changed, a keyed create and a client's reads (the order list filtered,
// windowed and paged, an order, its queue record, a cancel, the
// deliveries) read those tables through indexes only: no statement of a
// request, a stage or the push worker turns into a sequential scan as the
// tables grow. (The push worker's claim
// switches sequential scans off for its statement, so here it shows that
// an index can serve it, not that the planner would choose one.)
func TestOrderPathNeverScansLargeTables(t *testing.T) {
	waitsMostly(t)
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

	// A batch, worked by the batch queue's worker.
	const batched = 5
	items := make([]any, batched)
	for i := range items {
		items[i] = tshirtOrder(v.VariantID, fmt.Sprintf("plans-batch-%d", i), 1)
	}
	r := d.client.Do("POST", "/v1/orders/pod/batches", map[string]any{"orders": items})
	var st batchStatus
	r.JSON(t, &st)
	if r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		d.client.Get("/v1/orders/pod/batches/"+st.BatchID.String()).JSON(t, &st)
		if st.Status != "completed" || st.Succeeded != batched {
			return fmt.Errorf("batch %s: %d of %d succeeded", st.Status, st.Succeeded, st.Total)
		}
		return nil
	})
	waitRequests(t, rc, 3*(orders+warm+batched))
	// A webhook command of each kind the webhook decider stores.
	other := createWebhook(t, d.client, rc.url("/other"))
	if r := d.client.Do("PATCH", "/v1/me/webhooks/"+other.ID.String(), map[string]any{"is_active": false}); r.Status != 200 {
		t.Fatalf("patch webhook: %d %s", r.Status, r.Body)
	}
	if r := d.client.Do("DELETE", "/v1/me/webhooks/"+other.ID.String(), nil); r.Status != 204 {
		t.Fatalf("delete webhook: %d %s", r.Status, r.Body)
	}
	// A keyed create, and the reads a client makes: the order list
	// (filtered, windowed, paged), an order, its queue record, a cancel
	// refused, the webhook's deliveries.
	body := []byte(fmt.Sprintf(`{"customer":{"email":"ada@example.com","first_name":"Ada","last_name":"Lovelace"},
		"shipping_address":{"address1":"1 Main St","city":"Austin","province":"TX","country_code":"US","zip":"78701"},
		"line_items":[{"variant_id":%q,"quantity":1,"sides":{"front_side":"https://img.example.com/plans-keyed.png"}}]}`, v.VariantID))
	if r := postWithKey(t, d.client, "/v1/orders/pod", "k-plans", body); r.Status != 201 {
		t.Fatalf("keyed create: %d %s", r.Status, r.Body)
	}
	first := olList(t, d.client, "limit=5")
	if first.NextCursor == nil {
		t.Fatal("test setup: one page of orders")
	}
	id := first.Data[0].OrderID.String()
	now := time.Now().UTC()
	for _, path := range []string{
		"/v1/orders/pod?status=SUCCESS&limit=5",
		"/v1/orders/pod?from=" + now.Add(-time.Hour).Format(time.RFC3339) + "&to=" + now.Add(time.Hour).Format(time.RFC3339),
		"/v1/orders/pod?limit=5&cursor=" + *first.NextCursor,
		"/v1/orders/pod/" + id,
		"/v1/orders/pod/" + id + "/queue",
		"/v1/me/webhooks/" + w.ID.String() + "/deliveries?limit=5",
		"/v1/me/webhooks/" + w.ID.String() + "/deliveries?status=failed",
	} {
		if r := d.client.Get(path); r.Status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
	}
	if r := d.client.Do("POST", "/v1/orders/pod/"+id+"/cancel", nil); r.Status != 409 {
		t.Fatalf("cancel of a pushed order: %d %s", r.Status, r.Body)
	}
	after := settledSeqScans(t, d)
	for _, table := range largeTables {
		if n := after[table] - before[table]; n != 0 {
			t.Errorf("%s was read by %d sequential scans while %d orders, one by one and in a batch, were pushed and delivered, a webhook was created, changed and deleted, and orders were read", table, n, orders+batched)
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
		`INSERT INTO webhooks (id, account_id, url, topics, is_active, gen, secret, created_at, updated_at)
			SELECT gen_random_uuid(), gen_random_uuid(), 'https://filler.example/h', '{order.created}', true, 1, 's', now(), now()
			FROM generate_series(1, $1)`,
		`INSERT INTO webhook_decisions (command_id, webhook_id) SELECT gen_random_uuid(), gen_random_uuid() FROM generate_series(1, $1)`,
		`INSERT INTO idempotency_seeds (account_id, key, digest, seed) SELECT gen_random_uuid(), 'k-' || g, 'd', gen_random_uuid() FROM generate_series(1, $1) g`,
		`INSERT INTO store_queues (store_id, pending) SELECT gen_random_uuid(), 0 FROM generate_series(1, $1)`,
		// Finished batches of 100 items each.
		`INSERT INTO order_batches (batch_id, account_id, total) SELECT gen_random_uuid(), gen_random_uuid(), 100 FROM generate_series(1, $1 / 100)`,
		`INSERT INTO order_batch_items (batch_id, idx, body, done, http_status, finished_at)
			SELECT b.batch_id, i, '\x7b7d', true, 201, now() FROM order_batches b, generate_series(0, 99) i
			WHERE b.total = 100 AND NOT EXISTS (SELECT 1 FROM order_batch_items x WHERE x.batch_id = b.batch_id)`,
	} {
		var args []any
		if !containsNoArgs(q) {
			args = []any{n}
		}
		if _, err := d.app.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("fill: %v\n%s", err, q)
		}
	}
	// Vacuum (and analyze) the filled tables now, as a service that old
	// has been, so autovacuum does not do it inside the measured window.
	if _, err := d.app.Pool.Exec(ctx, "VACUUM ANALYZE "+strings.Join(largeTables, ", ")); err != nil {
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
