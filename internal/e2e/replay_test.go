package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
)

// tableRows renders every row of a table, ordered, as text.
func tableRows(t *testing.T, pool *pgxpool.Pool, table, order string) []string {
	t.Helper()
	// entry_position and queue_seq are the place and sequence number an
	// order took when it entered its store's queue as the projector saw it
	// then, and a store's frontier follows those numbers; with events of
	// several partitions applied in another interleaving they can differ, so
	// they are left out (the store queue counts, compared too, must agree,
	// and so must every queue position: checkStoreQueues).
	rows, err := pool.Query(context.Background(), fmt.Sprintf(`SELECT (to_jsonb(x) - 'entry_position' - 'queue_seq' - 'frontier')::text
		FROM %s x ORDER BY %s`, table, order))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestReplayRebuildsIdenticalReadModels drops the order and catalog read
// models with podctl replay against a running podsvc and checks the rebuilt
// rows are identical.
func TestReplayRebuildsIdenticalReadModels(t *testing.T) {
	bin := buildPodctl(t)
	d := startDemo(t, fastPushes)
	env := d.podctlEnv()
	ok := d.variant(t, "ACTIVE", "tshirt")
	broken := d.variant(t, "CREDENTIAL_ERROR", "tshirt")
	var ids []uuid.UUID
	for i := range 6 {
		v := ok
		if i%3 == 2 {
			v = broken
		}
		ids = append(ids, create(t, d.client, tshirtOrder(v.VariantID, fmt.Sprintf("replay-%d", i), i+1)).OrderID)
	}
	// Let every order settle: pushed, or failed with its retries used.
	for i, id := range ids {
		want := "SUCCESS"
		if i%3 == 2 {
			want = "FAILED"
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			o := d.detail(t, d.client, id)
			if o.Status != want || (want == "FAILED" && len(o.DeliveryAttempts) != 4) {
				return fmt.Errorf("order %d: %s, %d attempts", i, o.Status, len(o.DeliveryAttempts))
			}
			return nil
		})
	}
	// Fulfilment on one, a cancel on a failed one.
	r := runPodctl(t, bin, env, "fulfillment", "publish", "--order", ids[0].String(), "--status", "FULFILLED",
		"--tracking-number", "TRK1", "--carrier", "DHL", "--tracking-url", "https://dhl.example/TRK1", "--shipment-status", "in_transit")
	if r.err != nil || !strings.Contains(r.stdout, ids[0].String()) {
		t.Fatalf("fulfillment publish: %v %s %s", r.err, r.stdout, r.stderr)
	}
	if r := runPodctl(t, bin, env, "fulfillment", "publish", "--order", ids[0].String(), "--status", "SHIPPED"); r.err == nil ||
		!strings.Contains(r.stderr, "SYNCED or FULFILLED") {
		t.Fatalf("bad status accepted: %v %s", r.err, r.stderr)
	}
	if r := runPodctl(t, bin, env, "fulfillment", "publish", "--order", ids[0].String(), "--tracking-number", "TRK1", "--carrier", "DHL",
		"--tracking-url", "javascript:alert(1)"); r.err == nil || !strings.Contains(r.stderr, "tracking_url must be an http(s) URL") {
		t.Fatalf("a javascript: tracking URL was published: %v %s", r.err, r.stderr)
	}
	// Found by review: an update the decider refuses was published, and
	// podctl said nothing. It waits for the decision now, and says why.
	if r := runPodctl(t, bin, env, "fulfillment", "publish", "--order", uuid.NewString(), "--status", "SYNCED"); r.err == nil ||
		!strings.Contains(r.stderr, "was published and refused") {
		t.Fatalf("an update of an order that does not exist: %v %q %q", r.err, r.stdout, r.stderr)
	}
	// One for an order whose pushes failed is held until a push succeeds.
	if r := runPodctl(t, bin, env, "fulfillment", "publish", "--order", ids[2].String(), "--status", "SYNCED"); r.err != nil ||
		!strings.Contains(r.stdout, `"held": true`) || !strings.Contains(r.stderr, "the update is held") {
		t.Fatalf("an update of a failed order: %v %q %q", r.err, r.stdout, r.stderr)
	}
	// A tracking-only update is held the same way, and said to be (found
	// by review: it was told from the order's status, and read as applied).
	if r := runPodctl(t, bin, env, "fulfillment", "publish", "--order", ids[2].String(), "--tracking-number", "TRK2", "--carrier", "DHL"); r.err != nil ||
		!strings.Contains(r.stdout, `"held": true`) || !strings.Contains(r.stderr, "the update is held") {
		t.Fatalf("a tracking-only update of a failed order: %v %q %q", r.err, r.stdout, r.stderr)
	}
	d.waitStatus(t, d.client, ids[0], "FULFILLED")
	if r := d.client.Do("POST", "/v1/orders/pod/"+ids[2].String()+"/cancel", nil); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}

	pool := d.app.Pool
	before := map[string][]string{
		"orders":              tableRows(t, pool, "orders", "order_id"),
		"order_push_attempts": tableRows(t, pool, "order_push_attempts", "order_id, attempt"),
		"products":            tableRows(t, pool, "products", "product_id"),
		"variants":            tableRows(t, pool, "variants", "variant_id"),
		"store_queues":        tableRows(t, pool, "store_queues", "store_id"),
	}
	if len(before["orders"]) != 6 || len(before["order_push_attempts"]) < 6 {
		t.Fatalf("read model before the replay: %d orders, %d attempts", len(before["orders"]), len(before["order_push_attempts"]))
	}
	// Storage parameters an operator set on a read model's table stay
	// through its rebuild (LIKE leaves them out).
	if _, err := pool.Exec(context.Background(), `ALTER TABLE orders SET (fillfactor = 90, autovacuum_vacuum_threshold = 500, toast.autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"orders", "catalog"} {
		r := runPodctl(t, bin, env, "replay", "--projection", name, "--wait", "1m")
		if r.err != nil || !strings.Contains(r.stdout, `"rebuilt": true`) || !strings.Contains(r.stderr, "replaying "+name) {
			t.Fatalf("replay %s: %v\nstdout %s\nstderr %s", name, r.err, r.stdout, r.stderr)
		}
	}
	for table, rows := range before {
		after := tableRows(t, pool, table, map[string]string{"orders": "order_id", "order_push_attempts": "order_id, attempt",
			"products": "product_id", "variants": "variant_id", "store_queues": "store_id"}[table])
		if strings.Join(after, "\n") != strings.Join(rows, "\n") {
			t.Fatalf("%s differs after the replay:\nbefore %v\nafter  %v", table, rows, after)
		}
	}
	var options, toast []string
	if err := pool.QueryRow(context.Background(), `SELECT c.reloptions, t.reloptions FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid
		WHERE c.oid = 'orders'::regclass`).Scan(&options, &toast); err != nil {
		t.Fatal(err)
	}
	if want, wantToast := []string{"fillfactor=90", "autovacuum_vacuum_threshold=500"}, []string{"autovacuum_enabled=false"}; !slices.Equal(options, want) || !slices.Equal(toast, wantToast) {
		t.Fatalf("the rebuilt orders table has storage parameters %q and %q on its TOAST table, want %q and %q", options, toast, want, wantToast)
	}
	// A table with row-level security is not rebuilt: its policies would
	// not follow it.
	if _, err := pool.Exec(context.Background(), `ALTER TABLE orders ENABLE ROW LEVEL SECURITY`); err != nil {
		t.Fatal(err)
	}
	if r := runPodctl(t, bin, env, "replay", "--projection", "orders", "--wait", "1m"); r.err == nil || !strings.Contains(r.stderr, "row-level security") {
		t.Fatalf("a rebuild of a table with row-level security: %v\nstdout %s\nstderr %s", r.err, r.stdout, r.stderr)
	}
	if _, err := pool.Exec(context.Background(), `ALTER TABLE orders DISABLE ROW LEVEL SECURITY`); err != nil {
		t.Fatal(err)
	}
	if r := runPodctl(t, bin, env, "replay", "--projection", "nope"); r.err == nil || !strings.Contains(r.stderr, "catalog") {
		t.Fatalf("unknown projection: %v %s", r.err, r.stderr)
	}

	// Retention deletes the first record of a partition of the order
	// events: a replay would rebuild without the order it created, so it
	// is refused and resets nothing, unless told to go on.
	events := d.topic(schemas.TopicOrderEvents)
	adm := kadm.NewClient(d.app.Producer)
	ends, err := adm.ListEndOffsets(context.Background(), events)
	if err != nil {
		t.Fatal(err)
	}
	cut := kadm.Offsets{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 && len(cut) == 0 {
			cut.AddOffset(events, o.Partition, 1, -1)
		}
	})
	if _, err := adm.DeleteRecords(context.Background(), cut); err != nil {
		t.Fatal(err)
	}
	r = runPodctl(t, bin, env, "replay", "--projection", "orders", "--wait", "1m")
	if r.err == nil || !strings.Contains(r.stderr, "no longer holds its first records") {
		t.Fatalf("a replay from a truncated log: %v\nstdout %s\nstderr %s", r.err, r.stdout, r.stderr)
	}
	if after := tableRows(t, pool, "orders", "order_id"); strings.Join(after, "\n") != strings.Join(before["orders"], "\n") {
		t.Fatalf("a refused replay changed the orders")
	}
	if r := runPodctl(t, bin, env, "replay", "--projection", "orders", "--wait", "1m", "--from-truncated-log"); r.err != nil ||
		!strings.Contains(r.stdout, `"rebuilt": true`) {
		t.Fatalf("a replay told to go on from a truncated log: %v\nstdout %s\nstderr %s", r.err, r.stdout, r.stderr)
	}
	if after := tableRows(t, pool, "orders", "order_id"); len(after) != len(before["orders"])-1 {
		t.Fatalf("a replay from a log without one order's creation rebuilt %d orders, want %d", len(after), len(before["orders"])-1)
	}

	// Retention deletes every record of a partition (its orders are older
	// than POD_KAFKA_RETENTION, and none came since): the rebuild has
	// nothing to read there, and must not wait for it (found by review:
	// it waited until --wait ended, at every run).
	ends, err = adm.ListEndOffsets(context.Background(), events)
	if err != nil {
		t.Fatal(err)
	}
	emptied := kadm.Offsets{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 1 && len(emptied) == 0 {
			emptied.AddOffset(events, o.Partition, o.Offset, -1)
		}
	})
	if len(emptied) == 0 {
		t.Fatal("no partition of the order events holds two records")
	}
	if _, err := adm.DeleteRecords(context.Background(), emptied); err != nil {
		t.Fatal(err)
	}
	if r := runPodctl(t, bin, env, "replay", "--projection", "orders", "--wait", "1m", "--from-truncated-log"); r.err != nil ||
		!strings.Contains(r.stdout, `"rebuilt": true`) {
		t.Fatalf("a replay from a log with a partition emptied: %v\nstdout %s\nstderr %s", r.err, r.stdout, r.stderr)
	}
	if after := tableRows(t, pool, "orders", "order_id"); len(after) >= len(before["orders"])-1 {
		t.Fatalf("a replay from a log without a partition's orders rebuilt %d orders, want fewer than %d", len(after), len(before["orders"])-1)
	}
}
