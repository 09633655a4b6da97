package e2e

// Regression tests for findings of a review of the order pipeline.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/testenv"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Finding: a 503 "recorded but not decided in time ... repeat it with the
// same Idempotency-Key to learn the outcome" is not kept by the idempotency
// middleware, and the repeat builds a NEW command: it answers 409
// DUPLICATE_REFERENCE_ID for the caller's own order, and without a
// reference_id (force: true) it creates a second order.
// A create that got an undecided 503, repeated with its Idempotency-Key
// once the decider runs, answers for the same order; nothing is created twice.
func TestUndecidedCreateRepeatedWithSameIdempotencyKey(t *testing.T) {
	waitsMostly(t)
	d := startDemo(t, func(c *config.Config) { c.Roles = []string{config.RoleAPI, config.RoleProjector} }) // no decider yet
	v := d.variant(t, "ACTIVE", "tshirt")
	withRef, _ := json.Marshal(tshirtOrder(v.VariantID, "undecided-1", 1))
	noRefBody := tshirtOrder(v.VariantID, "", 2)
	noRefBody["force"] = true
	noRef, _ := json.Marshal(noRefBody)
	k1, k2 := uuid.NewString(), uuid.NewString()
	var r1, r2 testenv.Response
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r1 = postWithKey(t, d.client, "/v1/orders/pod", k1, withRef) }()
	go func() { defer wg.Done(); r2 = postWithKey(t, d.client, "/v1/orders/pod", k2, noRef) }()
	wg.Wait()
	if r1.Status != 503 || r2.Status != 503 {
		t.Fatalf("want 503 undecided: %d %s / %d %s", r1.Status, r1.Body, r2.Status, r2.Body)
	}
	t.Logf("first answers: %s", r1.Body)
	// The key is tied to its body for the window even though the 503 was
	// not kept: another body under it is refused, not answered with the
	// first body's order.
	if r := postWithKey(t, d.client, "/v1/orders/pod", k1, noRef); r.Status != 422 || r.Err(t).Error != schemas.CodeIdempotencyReused {
		t.Errorf("another body under the key of an undecided create: %d %s", r.Status, r.Body)
	}
	// The decider comes up (same DB and broker): the recorded commands are decided.
	d.startPeer(t, func(c *config.Config) { c.Roles = []string{config.RoleDecider} })
	id := order.OrderID(d.store(t, "ACTIVE").StoreID, "undecided-1")
	testenv.Eventually(t, 30*time.Second, func() error {
		if r := d.client.Get("/v1/orders/pod/" + id.String()); r.Status != 200 {
			return testenv.Errorf("GET: %d", r.Status)
		}
		return nil
	})
	waitCaughtUp(t, d, order.DeciderName, schemas.TopicOrderCommands) // the second (no-reference) order is decided too

	// Repeat both requests with the same keys, as the 503 message says.
	again1 := postWithKey(t, d.client, "/v1/orders/pod", k1, withRef)
	again2 := postWithKey(t, d.client, "/v1/orders/pod", k2, noRef)
	var page struct{ Data []orderrm.Order }
	d.client.Get("/v1/orders/pod").JSON(t, &page)
	t.Logf("repeat 1: %d %s", again1.Status, again1.Body)
	t.Logf("repeat 2: %d %s", again2.Status, again2.Body)
	t.Logf("orders now: %d", len(page.Data))
	if again1.Status != 201 {
		t.Errorf("repeat of an accepted create with the same Idempotency-Key: %d %s", again1.Status, again1.Body)
	}
	if len(page.Data) != 2 {
		t.Errorf("two idempotent requests made %d orders, want 2", len(page.Data))
	}
}

// forgetKeys removes the Idempotency-Key answers kept in Redis (what a 5xx
// leaves), and with seeds ends the keys' windows: their command seeds in
// Postgres are dated a day back, as they are once the window is over.
func forgetKeys(t *testing.T, d demoEnv, seeds bool) {
	t.Helper()
	ctx := context.Background()
	keys, err := d.app.Redis.Keys(ctx, d.cfg.RedisPrefix+"idem:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		d.app.Redis.Del(ctx, k)
	}
	if seeds {
		if _, err := d.app.Pool.Exec(ctx, `UPDATE idempotency_seeds SET created_at = created_at - interval '25 hours'`); err != nil {
			t.Fatal(err)
		}
	}
}

// Found by review: a keyed create's command seed was kept in Redis, so
// Redis restarted empty (or evicting keys) gave a repeat a new seed, and
// a create without a reference_id made a second order. The seed is kept
// in Postgres: with Redis emptied, the repeat is answered with the first
// order, and the account has one.
func TestAKeyedCreateRepeatedAfterRedisLostEverythingIsTheSameOrder(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	body, _ := json.Marshal(tshirtOrder(v.VariantID, "", 1)) // no reference_id: one is made up
	var first, again orderrm.Order
	r := postWithKey(t, d.client, "/v1/orders/pod", "k-lost", body)
	if r.Status != 201 || json.Unmarshal(r.Body, &first) != nil {
		t.Fatalf("first create: %d %s", r.Status, r.Body)
	}
	ctx := context.Background()
	keys, err := d.app.Redis.Keys(ctx, d.cfg.RedisPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys { // Redis restarted with nothing kept
		d.app.Redis.Del(ctx, k)
	}
	r = postWithKey(t, d.client, "/v1/orders/pod", "k-lost", body)
	if r.Status != 201 || json.Unmarshal(r.Body, &again) != nil || again.OrderID != first.OrderID {
		t.Fatalf("the repeat after Redis lost its keys: %d %s; want 201 with order %s", r.Status, r.Body, first.OrderID)
	}
	var page struct{ Data []orderrm.Order }
	d.client.Get("/v1/orders/pod?limit=100").JSON(t, &page)
	if len(page.Data) != 1 {
		t.Fatalf("the account has %d orders, want 1", len(page.Data))
	}
}

// Finding: a command's id came from the account and the Idempotency-Key
// alone, so once the key's 24 h were over, a create with another body
// under it was answered 201 from the first order's decision, with an
// order id that was never created.
// A key used again after its window is a new request.
func TestAKeyUsedAgainAfterItsWindowIsANewRequest(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	first, _ := json.Marshal(tshirtOrder(v.VariantID, "window-1", 1))
	second, _ := json.Marshal(tshirtOrder(v.VariantID, "window-2", 2))
	if r := postWithKey(t, d.client, "/v1/orders/pod", "k-window", first); r.Status != 201 {
		t.Fatalf("first create: %d %s", r.Status, r.Body)
	}
	forgetKeys(t, d, true) // the window is over
	r := postWithKey(t, d.client, "/v1/orders/pod", "k-window", second)
	var o orderrm.Order
	r.JSON(t, &o)
	if r.Status != 201 || o.ReferenceID != "window-2" {
		t.Fatalf("second create under the old key: %d %s", r.Status, r.Body)
	}
	if g := d.client.Get("/v1/orders/pod/" + o.OrderID.String()); g.Status != 200 {
		t.Errorf("the order the second create answered with: GET %d %s", g.Status, g.Body)
	}
}

// Finding: a key's command seed was kept under the key's name plus
// ":seed", which is the name another key, "K:seed", keeps its answer
// under: a fresh request under K then met that answer and was refused 422.
// Keys whose names extend one another are apart.
func TestKeysWhoseNamesExtendOneAnotherAreApart(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	for i, key := range []string{"k-apart:seed", "k-apart"} {
		body, _ := json.Marshal(tshirtOrder(v.VariantID, fmt.Sprintf("apart-%d", i), 1))
		if r := postWithKey(t, d.client, "/v1/orders/pod", key, body); r.Status != 201 {
			t.Errorf("create under %q: %d %s", key, r.Status, r.Body)
		}
	}
}

// Finding (review): a batch's id was new on every request, so a keyed batch
// POST repeated after an answer that was not kept (a 5xx after the batch
// was stored) stored a second batch, whose forced items made second orders.
// The repeat finds the batch it stored.
func TestAKeyedBatchRepeatedAfterALostAnswerIsTheSameBatch(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	body, _ := json.Marshal(map[string]any{"orders": []any{tshirtOrder(v.VariantID, "batch-once", 1)}})
	var ids []string
	for range 2 {
		r := postWithKey(t, d.client, "/v1/orders/pod/batches", "k-batch", body)
		var st struct {
			BatchID string `json:"batch_id"`
		}
		if r.Status != 202 || json.Unmarshal(r.Body, &st) != nil {
			t.Fatalf("batch: %d %s", r.Status, r.Body)
		}
		ids = append(ids, st.BatchID)
		forgetKeys(t, d, false) // the answer was not kept
	}
	if ids[0] != ids[1] {
		t.Errorf("a repeat of a keyed batch stored batch %s beside %s", ids[1], ids[0])
	}
}

// Finding: PATCH and DELETE derived their command ids from the key too,
// without the webhook or the body, so the second of two requests under
// one key was answered from the first one's decision and did nothing.
// An Idempotency-Key ties only POSTs together.
func TestAKeyDoesNotTiePatchesOrDeletesTogether(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	w1 := createWebhook(t, d.client, rc.url("/one"))
	w2 := createWebhook(t, d.client, rc.url("/two"))
	for _, active := range []bool{false, true} {
		body, _ := json.Marshal(map[string]any{"is_active": active})
		r := doWithKey(t, d.client, "PATCH", "/v1/me/webhooks/"+w2.ID.String(), "k-patch", body)
		var w webhookJSON
		r.JSON(t, &w)
		if r.Status != 200 || w.IsActive != active {
			t.Errorf("PATCH is_active %v: %d %s", active, r.Status, r.Body)
		}
	}
	for _, w := range []webhookJSON{w1, w2} {
		if r := doWithKey(t, d.client, "DELETE", "/v1/me/webhooks/"+w.ID.String(), "k-delete", nil); r.Status != 204 {
			t.Errorf("DELETE %s: %d %s", w.ID, r.Status, r.Body)
		}
		if r := d.client.Get("/v1/me/webhooks/" + w.ID.String()); r.Status != 404 {
			t.Errorf("GET of a deleted webhook: %d %s", r.Status, r.Body)
		}
	}
}

// Finding: an order created with force:true (no earlier twin) does not claim
// its content, so an identical non-forced order minutes later is not a soft
// duplicate.
// A forced order claims its content when it is free.
func TestForcedOrderClaimsItsContent(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	first := tshirtOrder(v.VariantID, "forced-1", 3)
	first["force"] = true
	create(t, d.client, first)
	second := tshirtOrder(v.VariantID, "forced-2", 3)
	second["line_items"].([]any)[0].(map[string]any)["sides"] = map[string]any{"front_side": "https://img.example.com/forced-1.png"}
	r := d.client.Do("POST", "/v1/orders/pod", second)
	if r.Status != 409 {
		t.Fatalf("same content within 24 h after a forced create: %d %s", r.Status, r.Body)
	}
}

// stallProjector holds a read model's table (orders, products) locked
// against writes (a slow projector, a replay, a lock wait) until the
// returned func, or the test's end: the read model lags while reads still
// answer.
func stallProjector(t *testing.T, d demoEnv, table string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.app.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// Finding: a 201 is returned while the read model lags, and the GET that
// follows answers 404.
// While the read model lags behind a 201, a GET does not answer 404.
func TestLaggingReadModelNeverAnswersNotFound(t *testing.T) {
	waitsMostly(t)
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	release := stallProjector(t, d, "orders")
	r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "lag-1", 1))
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var o orderrm.Order
	r.JSON(t, &o)
	// The read model is held back: the order is not "not found" but
	// catching up (503 with Retry-After); then it is served.
	g := d.client.Get("/v1/orders/pod/" + o.OrderID.String())
	if g.Status != 503 || g.Header.Get("Retry-After") == "" {
		t.Fatalf("GET while the read model lags: %d %s", g.Status, g.Body)
	}
	release()
	testenv.Eventually(t, 20*time.Second, func() error {
		if g := d.client.Get("/v1/orders/pod/" + o.OrderID.String()); g.Status != 200 {
			return testenv.Errorf("GET after the read model caught up: %d %s", g.Status, g.Body)
		}
		return nil
	})
}

// Found by review: a cancel (or retry) applied while the read model did
// not hold the order yet answered 500, and the client, told it failed,
// found it CANCELLED. It answers 503 catching up, with Retry-After; a
// repeat then answers from the read model.
func TestACommandAppliedWhileTheReadModelLagsIsNotAFailure(t *testing.T) {
	waitsMostly(t)
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	release := stallProjector(t, d, "orders")
	r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "lag-cancel", 1))
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var o orderrm.Order
	r.JSON(t, &o)
	if c := d.client.Do("POST", "/v1/orders/pod/"+o.OrderID.String()+"/cancel", nil); c.Status != 503 || c.Header.Get("Retry-After") == "" {
		t.Fatalf("cancel while the read model lags: %d %s; want 503 with Retry-After", c.Status, c.Body)
	}
	release()
	testenv.Eventually(t, 20*time.Second, func() error {
		var got orderrm.Order
		if g := d.client.Get("/v1/orders/pod/" + o.OrderID.String()); g.Status != 200 || json.Unmarshal(g.Body, &got) != nil || got.Status != "CANCELLED" {
			return testenv.Errorf("GET after the read model caught up: %d %s", g.Status, g.Body)
		}
		return nil
	})
}

// Finding (sessions ago, when events drove the pushes): a PROCESSING event
// delivered twice re-created the push job after the order moved on, and a
// CANCELLED order reached the platform. Pushes are jobs of the decider now;
// the test stays: an old PROCESSING event delivered again (at-least-once)
// after the order was cancelled does not push it.
func TestRepeatedEventNeverPushesCancelledOrder(t *testing.T) {
	d := startDemo(t, fastPushes)
	v := d.variant(t, "ACTIVE", "tshirt")
	shop := d.store(t, "ACTIVE").ShopDomain
	d.app.Simulator.FailNext(1000) // the platform is down for a while
	o := create(t, d.client, tshirtOrder(v.VariantID, "dup-ev-1", 1))
	testenv.Eventually(t, 60*time.Second, func() error {
		got := d.detail(t, d.client, o.OrderID)
		if got.Status != "FAILED" || len(got.DeliveryAttempts) != 4 {
			return testenv.Errorf("%s with %d attempts", got.Status, len(got.DeliveryAttempts))
		}
		return nil
	})
	d.app.Simulator.FailNext(0) // the platform is back
	if r := d.client.Do("POST", "/v1/orders/pod/"+o.OrderID.String()+"/cancel", nil); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	// Redeliver the first PROCESSING event, byte for byte (same id, same version).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var dup *kgo.Record
	if err := scanTopic(t, d.app.Brokers, d.topic(schemas.TopicOrderEvents), 20*time.Second, func(r *kgo.Record) bool {
		if dup == nil && string(r.Key) == o.OrderID.String() && strings.Contains(string(r.Value), `"client_status":"PROCESSING"`) {
			dup = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
		}
		return dup != nil
	}); err != nil {
		t.Fatal("no PROCESSING event found")
	}
	if err := d.app.Producer.ProduceSync(ctx, dup).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitPushesSettled(t, d, o.OrderID)
	got := d.detail(t, d.client, o.OrderID)
	if n := d.app.Simulator.Orders(shop); n != 0 {
		t.Fatalf("order is %s in our system but the platform received %d order(s)", got.Status, n)
	}
}

// Finding (when events went through an outbox): an order whose command
// fits the producer's record limit but whose event does not was accepted
// and then wedged the publishing of its commands partition, so no later
// event of any order on that partition was published.
// An order too large to publish is refused with 413 before it is accepted,
// and later orders flow.
func TestOversizedOrderRefusedBeforeAcceptance(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	b := tshirtOrder(v.VariantID, "big-note", 1)
	b["note"] = strings.Repeat("x", 5001)
	if r := d.client.Do("POST", "/v1/orders/pod", b); r.Status != 400 || r.Err(t).Message != "note must be at most 5000 characters" {
		t.Fatalf("long note: %d %s", r.Status, r.Body)
	}
	lines := make([]any, 100)
	for i := range lines {
		sides := map[string]any{}
		for _, s := range []string{"front_side", "back", "left_sleeve", "right_sleeve"} {
			sides[s] = "https://img.example.com/" + strings.Repeat("p", 2000)
		}
		lines[i] = map[string]any{"variant_id": v.VariantID, "quantity": 1, "sides": sides}
	}
	big := tshirtOrder(v.VariantID, "big-lines", 1)
	big["line_items"] = lines
	r := d.client.Do("POST", "/v1/orders/pod", big)
	if r.Status != 413 || r.Err(t).Error != schemas.CodePayloadTooLarge {
		t.Fatalf("order too large to publish: %d %.300s", r.Status, r.Body)
	}
	create(t, d.client, tshirtOrder(v.VariantID, "after-big", 1))
	var n int
	_ = d.app.Pool.QueryRow(context.Background(), `SELECT count(*) FROM order_state`).Scan(&n)
	if n != 1 {
		t.Fatalf("%d orders decided, want 1", n)
	}
}
