package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/cache"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/internal/wait"
	"github.com/printpod/pod/projections"
	catalogrm "github.com/printpod/pod/projections/catalog"
	orderrm "github.com/printpod/pod/projections/order"
)

// ctx2m is a context that ends after two minutes, or with the test.
func ctx2m(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// readModelShape describes the read models' tables as Postgres holds them:
// columns, constraints and indexes, by name.
func readModelShape(t *testing.T, d demoEnv) string {
	t.Helper()
	tables := append(append([]string{}, catalogrm.Tables...), orderrm.Tables...)
	var shape string
	err := d.app.Pool.QueryRow(context.Background(), `SELECT
		(SELECT string_agg(table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, ''),
			E'\n' ORDER BY table_name, ordinal_position) FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = ANY($1)) || E'\n' ||
		(SELECT string_agg(conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid), E'\n' ORDER BY conrelid::regclass::text, conname)
			FROM pg_constraint WHERE conrelid::regclass::text = ANY($1)) || E'\n' ||
		(SELECT string_agg(indexdef, E'\n' ORDER BY indexname) FROM pg_indexes
			WHERE schemaname = current_schema() AND tablename = ANY($1))`, tables).Scan(&shape)
	if err != nil {
		t.Fatal(err)
	}
	return shape
}

// TestRebuildKeepsTheLiveReadModelWholeUntilTheSwap rebuilds the catalog
// and the order read models through projections.Rebuild (what podctl
// replay runs) and checks that requests read the whole live read model
// until the swap, that an interrupted rebuild goes on where it stopped,
// that orders created during a rebuild are all in the read model after
// it, and that the swapped-in tables have the live tables' shape.
func TestRebuildKeepsTheLiveReadModelWholeUntilTheSwap(t *testing.T) {
	d := startDemo(t, fastPushes)
	v := d.variant(t, "ACTIVE", "tshirt")
	var ids []uuid.UUID
	for i := range 4 {
		ids = append(ids, create(t, d.client, tshirtOrder(v.VariantID, fmt.Sprintf("rebuild-%d", i), 1)).OrderID)
	}
	for _, id := range ids {
		d.waitStatus(t, d.client, id, "SUCCESS")
	}
	shape := readModelShape(t, d)
	pool := d.app.Pool
	catalogTables := map[string]string{"stores": "store_id", "products": "product_id", "variants": "variant_id"}
	rowsOf := func(schema string) map[string]string {
		out := map[string]string{}
		for table, order := range catalogTables {
			out[table] = strings.Join(tableRows(t, pool, schema+table, order), "\n")
		}
		return out
	}
	before := rowsOf("")
	rebuild := func(progress func(projections.Progress)) *projections.Rebuild {
		return &projections.Rebuild{Pool: pool, Brokers: d.app.Brokers, Producer: d.app.Producer, Naming: d.app.Naming,
			Log: podtest.Logger(t, "warn"), MaxBatch: 5, Progress: progress}
	}

	// The first run is stopped once it has caught up, its swap not made.
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	var caughtUp bool
	err := rebuild(func(p projections.Progress) {
		if p.Phase != projections.PhaseCatchingUp || caughtUp {
			return
		}
		caughtUp = true
		if p.Applied != p.Total || p.Total == 0 {
			t.Errorf("caught up at %d of %d records", p.Applied, p.Total)
		}
		// The rebuild is beside the live read model, not in it.
		if now := rowsOf(""); fmt.Sprint(now) != fmt.Sprint(before) {
			t.Errorf("the live catalog changed during its rebuild:\nbefore %v\nnow    %v", before, now)
		}
		if rebuilt := rowsOf(projections.ShadowSchema("catalog") + "."); fmt.Sprint(rebuilt) != fmt.Sprint(before) {
			t.Errorf("the rebuilt catalog differs:\nlive    %v\nrebuilt %v", before, rebuilt)
		}
		// Creates validate against the live catalog meanwhile.
		if r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "during-rebuild", 1)); r.Status != 201 {
			t.Errorf("a create during the catalog's rebuild: %d %s", r.Status, r.Body)
		}
		if err := rebuild(nil).Run(context.Background(), "catalog"); err == nil ||
			!strings.Contains(err.Error(), "another rebuild of catalog is running") {
			t.Errorf("a second rebuild of the catalog at once: %v", err)
		}
		stop()
	}).Run(ctx, "catalog")
	if !caughtUp || !errors.Is(err, context.Canceled) {
		t.Fatalf("a rebuild stopped before its swap: caught up %v, %v", caughtUp, err)
	}
	if now := rowsOf(""); fmt.Sprint(now) != fmt.Sprint(before) {
		t.Fatalf("a stopped rebuild changed the live catalog:\nbefore %v\nnow    %v", before, now)
	}

	// A migration that commits while a rebuild waits for its swap: the
	// rebuilt tables have the shape before it, so they are not swapped in.
	bump := func(by int) {
		t.Helper()
		if _, err := pool.Exec(context.Background(), `UPDATE schema_version SET version = version + $1`, by); err != nil {
			t.Fatal(err)
		}
	}
	var migrated bool
	err = rebuild(func(p projections.Progress) {
		if p.Phase == projections.PhaseCatchingUp && !migrated {
			migrated = true
			bump(1)
		}
	}).Run(ctx2m(t), "catalog")
	if migrated {
		bump(-1)
	}
	if err == nil || !strings.Contains(err.Error(), "a migration ran during the rebuild") {
		t.Fatalf("a rebuild whose swap came after a migration: %v", err)
	}
	if now := rowsOf(""); fmt.Sprint(now) != fmt.Sprint(before) {
		t.Fatalf("a rebuild refused for a migration changed the live catalog:\nbefore %v\nnow    %v", before, now)
	}

	// A bug corrupts a variant's price in the live catalog, and the API's
	// cache takes it.
	subtotal := func(ref string) string {
		t.Helper()
		o := create(t, d.client, tshirtOrder(v.VariantID, ref, 1))
		var p struct{ Subtotal any }
		if err := json.Unmarshal(o.Pricing, &p); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(p.Subtotal)
	}
	right := subtotal("price-before")
	if _, err := pool.Exec(context.Background(), `UPDATE variants SET price = price + 100 WHERE variant_id = $1`, v.VariantID); err != nil {
		t.Fatal(err)
	}
	announce := &pgx.Batch{}
	cache.QueueAnnounce(announce, catalogrm.CacheName)
	if err := pool.SendBatch(context.Background(), announce).Close(); err != nil {
		t.Fatal(err)
	}
	tries := 0
	testenv.Eventually(t, 10*time.Second, func() error {
		tries++
		if got := subtotal(fmt.Sprintf("price-corrupt-%d", tries)); got == right {
			return fmt.Errorf("subtotal %s: the API has not taken the corrupt price yet", got)
		}
		return nil
	})

	// The second run goes on from the first one's rebuild, and swaps.
	var first, last projections.Progress
	err = rebuild(func(p projections.Progress) {
		if first.Phase == "" {
			first = p
		}
		last = p
	}).Run(ctx2m(t), "catalog")
	if err != nil {
		t.Fatal(err)
	}
	if !first.Resumed || first.Applied != first.Total || last.Phase != projections.PhaseSwapped || last.Applied < last.Total {
		t.Fatalf("the second run: first %+v, last %+v; want it resumed at the log end and swapped with every record", first, last)
	}
	if now := rowsOf(""); fmt.Sprint(now) != fmt.Sprint(before) {
		t.Fatalf("the rebuilt catalog differs:\nbefore %v\nafter  %v", before, now)
	}
	var left int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = $1) +
		(SELECT count(*) FROM consumer_offsets WHERE consumer = $2)`,
		projections.ShadowSchema("catalog"), projections.RebuildConsumer(projections.All["catalog"])).Scan(&left); err != nil || left != 0 {
		t.Fatalf("the rebuild left its schema or offsets behind (%d): %v", left, err)
	}
	// The API prices from the swapped-in catalog at once: its cache was
	// told (without, it would keep the corrupt price for a minute).
	if got := subtotal("price-after"); got != right {
		t.Fatalf("a create right after the catalog's rebuild is priced %s, want %s", got, right)
	}

	// The order read model, rebuilt while orders keep coming: each is in
	// the read model once the rebuild is live, counted once, and what the
	// rebuild applied while it held the live projector is announced.
	announced := listenProjected(t, d)
	var mu sync.Mutex
	var during []uuid.UUID
	loadCtx, endLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; loadCtx.Err() == nil; i++ {
			r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, fmt.Sprintf("load-%d", i), 1))
			if r.Status != 201 {
				t.Errorf("a create during the orders' rebuild: %d %s", r.Status, r.Body)
				return
			}
			var o orderrm.Order
			r.JSON(t, &o)
			mu.Lock()
			during = append(during, o.OrderID)
			mu.Unlock()
		}
	}()
	var checked bool
	heldOrder := order.OrderID(d.store(t, "ACTIVE").StoreID, "held-by-the-swap")
	heldCreate := make(chan testenv.Response, 1)
	var heldVersion int
	err = rebuild(func(p projections.Progress) {
		if p.Phase != projections.PhaseCatchingUp || checked {
			return
		}
		checked = true
		// The live order read model is whole while the live projector
		// waits for the swap.
		for _, id := range ids {
			if r := d.client.Do("GET", "/v1/orders/pod/"+id.String(), nil); r.Status != 200 {
				t.Errorf("order %s during the orders' rebuild: %d %s", id, r.Status, r.Body)
			}
		}
		// An order created now reaches the rebuild, not the held live
		// projector: the swap is kept waiting until the rebuild has it.
		go func() {
			heldCreate <- d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "held-by-the-swap", 1))
		}()
		err := wait.Until[struct{}](ctx2m(t), nil, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			err := pool.QueryRow(ctx, `SELECT version FROM `+projections.ShadowSchema("orders")+`.orders WHERE order_id = $1`,
				heldOrder).Scan(&heldVersion)
			if errors.Is(err, pgx.ErrNoRows) {
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			t.Errorf("the rebuild did not apply an order created while it held the live projector: %v", err)
		}
	}).Run(ctx2m(t), "orders")
	endLoad()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if r := <-heldCreate; r.Status != 201 {
		t.Fatalf("a create while the swap held the live projector: %d %s", r.Status, r.Body)
	}
	// The version the rebuild applied was announced, by the swap: the
	// live projector went on past it.
	testenv.Eventually(t, 10*time.Second, func() error {
		if !announced(heldOrder, heldVersion) {
			return fmt.Errorf("order %s, created while the swap held the live projector, was never announced at version %d",
				heldOrder, heldVersion)
		}
		return nil
	})
	t.Logf("%d orders created during the orders' rebuild", len(during))
	if len(during) == 0 {
		t.Fatal("no order was created during the orders' rebuild")
	}
	if !checked {
		t.Fatal("the orders' rebuild never held the live projector for its swap")
	}
	for _, id := range append(ids, during...) {
		d.waitStatus(t, d.client, id, "SUCCESS")
	}
	checkStoreQueues(t, d)
	if now := readModelShape(t, d); now != shape {
		t.Fatalf("the rebuilt tables' shape differs from the live ones':\nbefore\n%s\nafter\n%s", shape, now)
	}
}

// listenProjected listens to the order read model's announcements until
// the test ends; announced tells whether an order was announced at a
// version.
func listenProjected(t *testing.T, d demoEnv) (announced func(id uuid.UUID, version int) bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.ConnectConfig(ctx, d.app.Pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+orderrm.NotifyProjected); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			id, value, _ := strings.Cut(n.Payload, " ")
			if p, ok := orderrm.ParseProjected(value); ok {
				mu.Lock()
				seen[fmt.Sprint(id, "@", p.Version)] = true
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close(context.Background())
	})
	return func(id uuid.UUID, version int) bool {
		mu.Lock()
		defer mu.Unlock()
		return seen[fmt.Sprint(id, "@", version)]
	}
}
