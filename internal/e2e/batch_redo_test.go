package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/batch"
	"github.com/printpod/pod/commands/catalog"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/testenv"
)

// TestBatchItemWorkedAgainAnswersFromItsDecision: an item whose create is
// on the log but not decided within the wait is left pending and worked
// again. When it is worked again its create has been decided (accepted),
// though its variant was archived meanwhile: the item is stored as the
// order it created (201 and that order's id), not as the 400 a fresh create
// of its body would answer now.
func TestBatchItemWorkedAgainAnswersFromItsDecision(t *testing.T) {
	waitsMostly(t)
	t.Run("decided before the item is worked again", func(t *testing.T) { waitsMostly(t); batchItemRedo(t, true) })
	// Found by review: the second work found no decision yet, validated
	// the body against today's catalog, and stored the 400.
	t.Run("worked again while still undecided", func(t *testing.T) { waitsMostly(t); batchItemRedo(t, false) })
}

// batchItemRedo plays an item whose create is on the log undecided while
// its variant is archived; holdJob keeps the item from being worked again
// until its create is decided, else it is worked again before.
func batchItemRedo(t *testing.T, holdJob bool) {
	d := startDemo(t, noPusher)
	ctx := context.Background()
	pool := d.app.Pool
	sh := newShelf(t, d)
	client, storeID, variantID := sh.client, sh.store, sh.variant

	// The decider cannot store decisions while the table is locked: the
	// item's create goes on the log and its wait ends undecided.
	decider := holdDecider(t, pool)

	r := client.Do("POST", "/v1/orders/pod/batches", map[string]any{"orders": []any{tshirtOrder(variantID, "redo-1", 1)}})
	if r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	var st batchStatus
	r.JSON(t, &st)
	command := batch.Item{Batch: st.BatchID, Index: 0}.CommandID()

	// Once the first work of the run ended (its job moved to attempt 2),
	// hold the job so that it is not worked again before the catalog and
	// the decision changed (when holdJob).
	var job pgx.Tx
	defer func() {
		if job != nil {
			_ = job.Rollback(ctx)
		}
	}()
	attempt := func() int { // the run's attempt; past any when the run has ended
		var n int
		err := pool.QueryRow(ctx, `SELECT attempt FROM jobs WHERE queue = $1 AND payload->>'batch' = $2`, batch.Queue, st.BatchID.String()).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			return math.MaxInt32
		}
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if !holdJob {
			if n := attempt(); n < 2 {
				return fmt.Errorf("the item's run is at attempt %d", n)
			}
			return nil
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		var attempt int
		var done bool
		err = tx.QueryRow(ctx, `SELECT j.attempt, i.done FROM jobs j JOIN order_batch_items i ON i.batch_id = (j.payload->>'batch')::uuid
			WHERE j.queue = $1 AND i.batch_id = $2 FOR UPDATE OF j NOWAIT`, batch.Queue, st.BatchID).Scan(&attempt, &done)
		if err == nil && attempt < 2 {
			err = fmt.Errorf("the item's run is at attempt %d", attempt)
		}
		if err == nil && done {
			err = errors.New("the item is done, not left for another work")
			t.Error(err)
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		job = tx
		return nil
	})
	if t.Failed() {
		t.FailNow()
	}

	// The variant is archived; a single create of the body is refused now.
	sh.set(t, d, "ARCHIVED")
	testenv.Eventually(t, 30*time.Second, func() error {
		if r := client.Do("POST", "/v1/orders/pod", tshirtOrder(variantID, "redo-probe", 1)); r.Status != 400 {
			return fmt.Errorf("a create with the archived variant: %d %s", r.Status, r.Body)
		}
		return nil
	})
	if !holdJob {
		// The item is worked again, still undecided, after the archive.
		after := attempt()
		testenv.Eventually(t, 60*time.Second, func() error {
			if n := attempt(); n <= after {
				return fmt.Errorf("the item's run is still at attempt %d", n)
			}
			return nil
		})
		client.Get("/v1/orders/pod/batches/"+st.BatchID.String()).JSON(t, &st)
		if st.Items[0].Status != "pending" {
			t.Fatalf("an item whose create is on the log undecided was stored as %s %d %s", st.Items[0].Status, deref(st.Items[0].HTTPStatus), st.Items[0].Error)
		}
	}
	// The decider stores its decision: the item's order was created.
	decided := releaseDecider(t, decider, pool, command)
	if decided.OrderID != order.OrderID(storeID, "redo-1") {
		t.Fatalf("the item's create was decided %+v; want order %s", decided, order.OrderID(storeID, "redo-1"))
	}

	// The item is worked again.
	if job != nil {
		if err := job.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		job = nil
	}
	itemCreatedAs(t, client, st.BatchID, decided)
	if r := client.Get("/v1/orders/pod/" + decided.OrderID.String()); r.Status != 200 {
		t.Fatalf("the item's order: %d %s", r.Status, r.Body)
	}
}

// TestABatchItemWhoseWorkerStoppedAfterItsSendAnswersFromItsDecision: a
// worker put an item's create on the log and stopped before it stored
// that (its lease ended with the run marked worked, no item marked sent),
// while the decider was behind; the item's variant was archived since.
// Worked again, the item is not validated against today's catalog (a 400
// stored while the decider creates its order): it waits until the decider
// has read the log, then answers from the decision.
func TestABatchItemWhoseWorkerStoppedAfterItsSendAnswersFromItsDecision(t *testing.T) {
	waitsMostly(t)
	d := startDemo(t, noPusher)
	ctx := context.Background()
	pool := d.app.Pool
	sh := newShelf(t, d)

	decider := holdDecider(t, pool)
	r := sh.client.Do("POST", "/v1/orders/pod/batches", map[string]any{"orders": []any{tshirtOrder(sh.variant, "stopped-1", 1)}})
	if r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	var st batchStatus
	r.JSON(t, &st)
	command := batch.Item{Batch: st.BatchID, Index: 0}.CommandID()

	// Once the item's create is on the log (its first work ended with it
	// undecided), the run is made what a worker that stopped right after
	// the send leaves: leased and worked, the item not marked sent. It is
	// kept from the worker until the variant is archived.
	job := func() (attempt int, payload string) { // past any attempt once the run has ended
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT attempt, payload::text FROM jobs WHERE queue = $1 AND payload->>'batch' = $2`,
			batch.Queue, st.BatchID.String()).Scan(&attempt, &payload)
		if errors.Is(err, pgx.ErrNoRows) {
			return math.MaxInt32, ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return attempt, payload
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if n, payload := job(); n < 2 || !strings.Contains(payload, `"sent"`) {
			return fmt.Errorf("the item's run is at attempt %d: %s", n, payload)
		}
		return nil
	})
	if _, err := pool.Exec(ctx, `UPDATE jobs SET payload = (payload - 'sent') || '{"worked": true}', attempt = 1,
		due_at = now() + interval '1 hour' WHERE queue = $1 AND payload->>'batch' = $2`, batch.Queue, st.BatchID.String()); err != nil {
		t.Fatal(err)
	}
	sh.set(t, d, "ARCHIVED")
	testenv.Eventually(t, 30*time.Second, func() error {
		if r := sh.client.Do("POST", "/v1/orders/pod", tshirtOrder(sh.variant, "stopped-probe", 1)); r.Status != 400 {
			return fmt.Errorf("a create with the archived variant: %d %s", r.Status, r.Body)
		}
		return nil
	})

	// Worked again while the decider is still behind: the item stays open.
	if _, err := pool.Exec(ctx, `UPDATE jobs SET due_at = now() WHERE queue = $1 AND payload->>'batch' = $2`,
		batch.Queue, st.BatchID.String()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if n, _ := job(); n < 2 {
			return fmt.Errorf("the item's run is still at attempt %d", n)
		}
		return nil
	})
	// The log end it waits for is kept: a decider that lags behind a
	// moving end still reaches it.
	if _, payload := job(); !strings.Contains(payload, `"log_end"`) {
		t.Errorf("the run kept no log end to wait for: %s", payload)
	}
	sh.client.Get("/v1/orders/pod/batches/"+st.BatchID.String()).JSON(t, &st)
	if st.Items[0].Status != "pending" {
		t.Fatalf("an item whose create may be on the log was stored as %s %d %s while the decider was behind",
			st.Items[0].Status, deref(st.Items[0].HTTPStatus), st.Items[0].Error)
	}

	// The decider catches up: the item's order was created, and the item
	// says so.
	itemCreatedAs(t, sh.client, st.BatchID, releaseDecider(t, decider, pool, command))
}

// holdDecider keeps the order decider from storing decisions (a lock on
// their table, in the transaction it returns) until releaseDecider, or
// the test's end.
func holdDecider(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	decider, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = decider.Rollback(ctx) })
	if _, err := decider.Exec(ctx, `LOCK TABLE order_decisions IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	return decider
}

// releaseDecider ends decider, the transaction that kept the order decider
// from storing decisions, and returns command's decision once stored,
// which must be accepted.
func releaseDecider(t *testing.T, decider pgx.Tx, pool *pgxpool.Pool, command uuid.UUID) order.Decision {
	t.Helper()
	ctx := context.Background()
	if err := decider.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var decided order.Decision
	testenv.Eventually(t, 60*time.Second, func() error {
		dec, ok, err := order.LoadDecision(ctx, pool, command)
		if err != nil || !ok {
			return fmt.Errorf("item's create not decided yet (%v)", err)
		}
		decided = dec
		return nil
	})
	if !decided.Accepted() {
		t.Fatalf("the item's create was decided %+v; want accepted", decided)
	}
	return decided
}

// itemCreatedAs waits for the one-item batch id to complete, and checks
// that its item is stored as the order decided created.
func itemCreatedAs(t *testing.T, client *testenv.Client, id uuid.UUID, decided order.Decision) {
	t.Helper()
	var st batchStatus
	testenv.Eventually(t, 2*time.Minute, func() error {
		client.Get("/v1/orders/pod/batches/"+id.String()).JSON(t, &st)
		if st.Status != "completed" {
			return fmt.Errorf("batch %s: %d/%d", st.Status, st.Processed, st.Total)
		}
		return nil
	})
	it := st.Items[0]
	if it.Status != "created" || it.HTTPStatus == nil || *it.HTTPStatus != 201 || it.OrderID == nil || *it.OrderID != decided.OrderID {
		t.Fatalf("item stored as %s %d %v %s; its create was accepted as order %s", it.Status, deref(it.HTTPStatus), it.OrderID, it.Error, decided.OrderID)
	}
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// shelf is an account of its own with one store selling one t-shirt
// variant, whose product a test can archive.
type shelf struct {
	account                 uuid.UUID
	client                  *testenv.Client
	store, product, variant uuid.UUID
	domain                  string
}

func newShelf(t *testing.T, d demoEnv) shelf {
	t.Helper()
	account, token := d.newAccount(t, "shelf-"+testenv.RandomSuffix())
	sh := shelf{account: account, client: testenv.NewClient(t, "http://"+d.app.Addr(), token),
		store: uuid.New(), product: uuid.New(), variant: uuid.New(), domain: "shelf-" + testenv.RandomSuffix() + ".myshopify.com"}
	sh.set(t, d, "ACTIVE")
	return sh
}

// set imports the shelf with its product at status and waits for it.
func (sh shelf) set(t *testing.T, d demoEnv, status string) {
	t.Helper()
	sh.setPriced(t, d, status, "10")
}

// setPriced imports the shelf with its product at status, its variant at
// price, and waits for it.
func (sh shelf) setPriced(t *testing.T, d demoEnv, status, price string) {
	t.Helper()
	importAndWait(t, d, sh.account, catalog.File{Stores: []catalog.StoreDoc{{StoreID: &sh.store, Name: "Shelf", Status: "ACTIVE", ShopDomain: sh.domain,
		Products: []catalog.ProductDoc{{ProductID: &sh.product, Title: "Shelf Tee", Status: status,
			Variants: []catalog.VariantDoc{{VariantID: &sh.variant, Title: "M", SKU: "SH-M", Price: price, Category: "tshirt"}}}}}}})
}

// A keyed create repeated after its command was decided, while the read
// model lags, is not answered with a 201 built from the request as read
// today (the catalog's prices may have changed since the order was
// priced): found by review. It is 503, catching up, and once the read
// model holds the order, the 201 is the order as it was priced.
func TestAKeyedRepeatWhileTheReadModelLagsIsNotPricedAnew(t *testing.T) {
	waitsMostly(t)
	d := startDemo(t, func(c *config.Config) { c.Roles = []string{config.RoleAPI, config.RoleProjector} }) // no decider yet
	sh := newShelf(t, d)
	body, _ := json.Marshal(tshirtOrder(sh.variant, "keyed-lag", 1))
	if r := postWithKey(t, sh.client, "/v1/orders/pod", "k-lag", body); r.Status != 503 {
		t.Fatalf("first create without a decider: %d %s", r.Status, r.Body)
	}
	sh.setPriced(t, d, "ACTIVE", "99")
	ctx := context.Background()
	release := stallProjector(t, d, "orders")
	d.startPeer(t, func(c *config.Config) { c.Roles = []string{config.RoleDecider} })
	id := order.OrderID(sh.store, "keyed-lag")
	testenv.Eventually(t, 60*time.Second, func() error {
		if _, known, err := order.LoadState(ctx, d.app.Pool, sh.account, id); err != nil || !known {
			return fmt.Errorf("the create is not decided yet (%v)", err)
		}
		return nil
	})
	if r := postWithKey(t, sh.client, "/v1/orders/pod", "k-lag", body); r.Status != 503 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("the repeat while the read model lags: %d %s; want 503 with Retry-After", r.Status, r.Body)
	}
	release()
	var got, stored struct {
		OrderID uuid.UUID       `json:"order_id"`
		Pricing json.RawMessage `json:"pricing"`
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		r := postWithKey(t, sh.client, "/v1/orders/pod", "k-lag", body)
		if r.Status != 201 || json.Unmarshal(r.Body, &got) != nil || got.OrderID != id {
			return fmt.Errorf("the repeat once the read model caught up: %d %s", r.Status, r.Body)
		}
		return nil
	})
	sh.client.Get("/v1/orders/pod/"+id.String()).JSON(t, &stored)
	if string(got.Pricing) != string(stored.Pricing) || strings.Contains(string(got.Pricing), "99") {
		t.Fatalf("the repeat's pricing %s; want the order's as priced, %s", got.Pricing, stored.Pricing)
	}
}

// A keyed create repeated once its order has moved on (decided, pushed,
// SUCCESS) answers the order as it is: found by review, it said PENDING,
// with a queue position made up for an order already pushed.
func TestAKeyedRepeatAfterTheOrderMovedOnShowsItAsItIs(t *testing.T) {
	waitsMostly(t)
	d := startDemo(t, func(c *config.Config) { c.Roles = []string{config.RoleAPI, config.RoleProjector} }) // no decider yet
	sh := newShelf(t, d)
	body, _ := json.Marshal(tshirtOrder(sh.variant, "keyed-moved", 1))
	if r := postWithKey(t, sh.client, "/v1/orders/pod", "k-moved", body); r.Status != 503 {
		t.Fatalf("first create without a decider: %d %s", r.Status, r.Body)
	}
	d.startPeer(t, func(c *config.Config) { c.Roles = []string{config.RoleDecider, config.RolePusher} })
	id := order.OrderID(sh.store, "keyed-moved")
	testenv.Eventually(t, 60*time.Second, func() error {
		if r := sh.client.Get("/v1/orders/pod/" + id.String()); r.Status != 200 {
			return fmt.Errorf("the order is not in the read model yet: %d", r.Status)
		}
		return nil
	})
	d.waitStatus(t, sh.client, id, "SUCCESS")
	r := postWithKey(t, sh.client, "/v1/orders/pod", "k-moved", body)
	var got struct {
		OrderID       uuid.UUID `json:"order_id"`
		Status        string    `json:"status"`
		QueuePosition *int      `json:"queue_position"`
	}
	if r.Status != 201 || json.Unmarshal(r.Body, &got) != nil || got.OrderID != id {
		t.Fatalf("the repeat after the push: %d %s", r.Status, r.Body)
	}
	if got.Status != "SUCCESS" || got.QueuePosition != nil {
		t.Fatalf("the repeat after the push shows the order %s (%s); want it as it is, SUCCESS, out of the queue", got.Status, r.Body)
	}
}

// A create repeated under its Idempotency-Key after an undecided 503 waits
// for the decision of the command it sent, whatever the catalog says
// since: found by review, the repeat validated the body again and kept a
// 400 for 24 h for an order the decider then created.
func TestAKeyedCreateRepeatedWhileUndecidedWaitsForItsDecision(t *testing.T) {
	waitsMostly(t)
	keyedRepeat(t, "keyed-redo", false)
}

// TestAKeyedRepeatAfterARequestThatDiedMidWayAnswersFromItsDecision: the
// first request's process died between the send and the seed's sent mark.
// The repeat is not validated against today's catalog either (a 400 while
// the decider will create the order): it is a 503 that records nothing
// while the decider has not read the log that far, and the order's 201
// once it has.
func TestAKeyedRepeatAfterARequestThatDiedMidWayAnswersFromItsDecision(t *testing.T) {
	waitsMostly(t)
	keyedRepeat(t, "keyed-died", true)
}

// keyedRepeat sends a keyed create while no decider runs (its command goes
// on the log, undecided: a 503), unmarks the key's seed sent when died
// (what a process that died between the send and the mark leaves),
// archives the variant, and repeats the create: a 503 until a decider
// runs, then the order's 201.
func keyedRepeat(t *testing.T, ref string, died bool) {
	d := startDemo(t, func(c *config.Config) { c.Roles = []string{config.RoleAPI, config.RoleProjector} }) // no decider yet
	sh := newShelf(t, d)
	key := "k-" + ref
	body, _ := json.Marshal(tshirtOrder(sh.variant, ref, 1))
	if r := postWithKey(t, sh.client, "/v1/orders/pod", key, body); r.Status != 503 {
		t.Fatalf("first create without a decider: %d %s", r.Status, r.Body)
	}
	repeatSays := "recorded but not decided"
	if died {
		if _, err := d.app.Pool.Exec(context.Background(), `UPDATE idempotency_seeds SET sent = false WHERE account_id = $1 AND key = $2`,
			sh.account, key); err != nil {
			t.Fatal(err)
		}
		repeatSays = "not read that far"
	}
	sh.set(t, d, "ARCHIVED")
	testenv.Eventually(t, 30*time.Second, func() error {
		if r := sh.client.Do("POST", "/v1/orders/pod", tshirtOrder(sh.variant, ref+"-probe", 1)); r.Status != 400 {
			return fmt.Errorf("a create with the archived variant: %d %s", r.Status, r.Body)
		}
		return nil
	})
	if r := postWithKey(t, sh.client, "/v1/orders/pod", key, body); r.Status != 503 || !strings.Contains(string(r.Body), repeatSays) {
		t.Fatalf("the repeat before a decider runs: %d %s; want a 503 saying %q", r.Status, r.Body, repeatSays)
	}
	d.startPeer(t, func(c *config.Config) { c.Roles = []string{config.RoleDecider} })
	want := order.OrderID(sh.store, ref)
	testenv.Eventually(t, 60*time.Second, func() error {
		r := postWithKey(t, sh.client, "/v1/orders/pod", key, body)
		var o struct {
			OrderID uuid.UUID `json:"order_id"`
		}
		if r.Status != 201 || json.Unmarshal(r.Body, &o) != nil || o.OrderID != want {
			return fmt.Errorf("the repeat once a decider runs: %d %s", r.Status, r.Body)
		}
		return nil
	})
}
