package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/testenv"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
)

// noPusher keeps orders PENDING: the pusher role is off.
func noPusher(c *config.Config) {
	c.Roles = []string{config.RoleAPI, config.RoleDecider, config.RoleProjector}
}

func create(t *testing.T, c *testenv.Client, body any) orderrm.Order {
	t.Helper()
	r := c.Do("POST", "/v1/orders/pod", body)
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var o orderrm.Order
	r.JSON(t, &o)
	return o
}

func TestOrderLifecycleSuccess(t *testing.T) {
	d := startDemo(t, fastPushes)
	v := d.variant(t, "ACTIVE", "tshirt")
	r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "life-1", 2))
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var o orderrm.Order
	r.JSON(t, &o)
	if o.Status != "PENDING" || o.CreatedVia != "api" || o.ReferenceID != "life-1" || o.Duplicate {
		t.Fatalf("created order: %s", r.Body)
	}
	if o.OrderID != order.OrderID(d.store(t, "ACTIVE").StoreID, "life-1") {
		t.Fatalf("order id is not UUIDv5(store, reference): %s", o.OrderID)
	}
	for _, f := range []string{`"pricing":{"subtotal":`, `"addon_service":[]`, `"queue_position":`, `"created_via":"api"`} {
		if !strings.Contains(string(r.Body), f) {
			t.Errorf("create response lacks %s: %s", f, r.Body)
		}
	}
	// Read-your-writes: the GET right after the 201 sees the order.
	got := d.detail(t, d.client, o.OrderID)
	if got.OrderID != o.OrderID || len(got.LineItems) != 1 || got.Customer["email"] != "ada@example.com" ||
		got.ShippingAddress["country_code"] != "US" {
		t.Fatalf("detail: %+v", got)
	}
	li := got.LineItems[0]
	if li["line_item_id"] == nil || li["sku"] != v.SKU || li["quantity"] != float64(2) || li["line_total"] == nil {
		t.Fatalf("line item: %v", li)
	}
	done := d.waitStatus(t, d.client, o.OrderID, "SUCCESS")
	if len(done.DeliveryAttempts) != 1 || done.DeliveryAttempts[0].Outcome == nil || *done.DeliveryAttempts[0].Outcome != "success" ||
		done.DeliveryAttempts[0].FinishedAt == nil {
		t.Fatalf("attempts: %+v", done.DeliveryAttempts)
	}
	if done.PlatformOrderID == nil || done.QueuePosition != nil {
		t.Fatalf("pushed order: %+v", done)
	}
	var qr orderrm.QueueRecord
	d.client.Get("/v1/orders/pod/"+o.OrderID.String()+"/queue").JSON(t, &qr)
	if qr.Status != "SUCCESS" || qr.PlatformOrderID == nil || qr.IdempotencyKey == uuid.Nil || qr.QueuePosition != nil {
		t.Fatalf("queue record: %+v", qr)
	}

	// Success is not FAILED: retry and cancel are refused.
	for _, p := range []string{"/retry", "/cancel"} {
		r := d.client.Do("POST", "/v1/orders/pod/"+o.OrderID.String()+p, nil)
		if r.Status != 409 || r.Err(t).Error != schemas.CodeInvalidOrderState {
			t.Fatalf("%s on SUCCESS: %d %s", p, r.Status, r.Body)
		}
	}

	// Fulfilment: SYNCED, tracking, FULFILLED, tracking update.
	ctx := context.Background()
	pub := func(status string, tr *schemas.Tracking) {
		t.Helper()
		if err := order.PublishFulfillment(ctx, d.app.Producer, d.app.Naming, schemas.FulfillmentUpdate{ID: uuid.New(), OrderID: o.OrderID,
			Status: status, Tracking: tr, SentAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	pub("SYNCED", nil)
	d.waitStatus(t, d.client, o.OrderID, "SYNCED")
	tr := &schemas.Tracking{TrackingNumber: "1Z999", Carrier: "UPS", TrackingURL: "https://track.example/1Z999", ShipmentStatus: "in_transit"}
	pub("FULFILLED", tr)
	f := d.waitStatus(t, d.client, o.OrderID, "FULFILLED")
	if f.Tracking["tracking_number"] != "1Z999" {
		t.Fatalf("tracking: %v", f.Tracking)
	}
	tr2 := *tr
	tr2.ShipmentStatus = "delivered"
	pub("", &tr2)
	testenv.Eventually(t, 20*time.Second, func() error {
		if s := d.detail(t, d.client, o.OrderID).Tracking["shipment_status"]; s != "delivered" {
			return fmt.Errorf("shipment status %v", s)
		}
		return nil
	})
	// A fulfilment update for an order in the wrong state changes nothing.
	pub("SYNCED", nil)

	evs := orderEvents(t, d, o.OrderID, 7)
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	want := "order.created order.status_updated order.status_updated order.status_updated order.status_updated tracking.created tracking.updated"
	if strings.Join(types, " ") != want {
		t.Fatalf("events of the order:\n got %s\nwant %s", strings.Join(types, " "), want)
	}
}

func TestCredentialErrorStoreFailsAndRetryLimits(t *testing.T) {
	d := startDemo(t, fastPushes)
	v := d.variant(t, "CREDENTIAL_ERROR", "tshirt")
	o := create(t, d.client, tshirtOrder(v.VariantID, "cred-1", 1))
	id := o.OrderID.String()
	// One push and three automatic retries, all failing.
	var f orderDetail
	testenv.Eventually(t, 30*time.Second, func() error {
		f = d.detail(t, d.client, o.OrderID)
		if f.Status != "FAILED" || len(f.DeliveryAttempts) != 4 {
			return fmt.Errorf("status %s after %d attempts", f.Status, len(f.DeliveryAttempts))
		}
		return nil
	})
	for _, a := range f.DeliveryAttempts {
		if a.Outcome == nil || *a.Outcome != "failed" || a.Error == nil || !strings.Contains(*a.Error, "credentials") {
			t.Fatalf("attempt: %+v", a)
		}
	}
	waitPushesSettled(t, d, o.OrderID) // no fifth automatic attempt comes
	if n := len(d.detail(t, d.client, o.OrderID).DeliveryAttempts); n != 4 {
		t.Fatalf("%d attempts after the automatic retries ran out", n)
	}
	for i := 1; i <= order.MaxManualRetries; i++ {
		r := d.client.Do("POST", "/v1/orders/pod/"+id+"/retry", nil)
		if r.Status != 200 {
			t.Fatalf("retry %d: %d %s", i, r.Status, r.Body)
		}
		var ro orderrm.Order
		r.JSON(t, &ro)
		if ro.Status != "PENDING" {
			t.Fatalf("retry %d answered status %s", i, ro.Status)
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			f = d.detail(t, d.client, o.OrderID)
			if f.Status != "FAILED" || len(f.DeliveryAttempts) != 4+i {
				return fmt.Errorf("status %s after %d attempts", f.Status, len(f.DeliveryAttempts))
			}
			return nil
		})
	}
	r := d.client.Do("POST", "/v1/orders/pod/"+id+"/retry", nil)
	if r.Status != 409 || r.Err(t).Error != schemas.CodeRetryLimitReached {
		t.Fatalf("sixth retry: %d %s", r.Status, r.Body)
	}
	// A FAILED order can be cancelled; then nothing more.
	r = d.client.Do("POST", "/v1/orders/pod/"+id+"/cancel", nil)
	var co orderrm.Order
	r.JSON(t, &co)
	if r.Status != 200 || co.Status != "CANCELLED" {
		t.Fatalf("cancel FAILED: %d %s", r.Status, r.Body)
	}
	for _, p := range []string{"/retry", "/cancel"} {
		r := d.client.Do("POST", "/v1/orders/pod/"+id+p, nil)
		if r.Status != 409 || r.Err(t).Error != schemas.CodeInvalidOrderState {
			t.Fatalf("%s on CANCELLED: %d %s", p, r.Status, r.Body)
		}
	}
}

func TestPendingQueueAndCancel(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	var ids []uuid.UUID
	for i := range 3 {
		o := create(t, d.client, tshirtOrder(v.VariantID, fmt.Sprintf("queue-%d", i), 1))
		if o.QueuePosition == nil || *o.QueuePosition != i+1 {
			t.Fatalf("order %d queue position %v", i, o.QueuePosition)
		}
		ids = append(ids, o.OrderID)
	}
	// Retry of a PENDING order is refused.
	r := d.client.Do("POST", "/v1/orders/pod/"+ids[0].String()+"/retry", nil)
	if r.Status != 409 || r.Err(t).Error != schemas.CodeInvalidOrderState {
		t.Fatalf("retry PENDING: %d %s", r.Status, r.Body)
	}
	r = d.client.Do("POST", "/v1/orders/pod/"+ids[0].String()+"/cancel", nil)
	var co orderrm.Order
	r.JSON(t, &co)
	if r.Status != 200 || co.Status != "CANCELLED" || co.QueuePosition != nil {
		t.Fatalf("cancel PENDING: %d %s", r.Status, r.Body)
	}
	// The others move up.
	var qr orderrm.QueueRecord
	d.client.Get("/v1/orders/pod/"+ids[2].String()+"/queue").JSON(t, &qr)
	if qr.Status != "PENDING" || qr.QueuePosition == nil || *qr.QueuePosition != 2 || qr.QueuedAt.IsZero() {
		t.Fatalf("queue record after a cancel: %+v", qr)
	}
	d.client.Get("/v1/orders/pod/"+ids[0].String()+"/queue").JSON(t, &qr)
	if qr.Status != "FAILED" || qr.QueuePosition != nil {
		t.Fatalf("queue record of a cancelled order: %+v", qr)
	}
	// A new order takes the place behind the two still waiting.
	if o := create(t, d.client, tshirtOrder(v.VariantID, "queue-3", 1)); o.QueuePosition == nil || *o.QueuePosition != 3 {
		t.Fatalf("order created after a cancel: queue position %v, want 3", o.QueuePosition)
	}
	checkStoreQueues(t, d)
	// Cancelled events: order.cancelled with previous PENDING, no status_updated.
	evs := orderEvents(t, d, ids[0], 2)
	if evs[1].Type != schemas.TypeOrderCancelled || !strings.Contains(string(evs[1].Data), `"previous":{"status":"PENDING"}`) {
		t.Fatalf("cancel event: %s %s", evs[1].Type, evs[1].Data)
	}
}

// TestCancelRacingPush: cancel and push never both win. Orders wait with
// no pusher running; then a pusher starts while the orders are cancelled
// one after another, so the cancels sent before it claims the orders win,
// those sent after lose, and those in between race its start_push.
func TestCancelRacingPush(t *testing.T) {
	d := startDemo(t, noPusher, fastPushes)
	v := d.variant(t, "ACTIVE", "tshirt")
	const n = 40
	type result struct {
		id     uuid.UUID
		status int
		body   []byte
	}
	results := make([]result, n)
	for i := range n {
		results[i].id = create(t, d.client, tshirtOrder(v.VariantID, fmt.Sprintf("race-cancel-%d", i), 1)).OrderID
	}
	cancelled := make(chan struct{})
	go func() {
		defer close(cancelled)
		for i := range results {
			c := d.client.Do("POST", "/v1/orders/pod/"+results[i].id.String()+"/cancel", nil)
			results[i].status, results[i].body = c.Status, c.Body
		}
	}()
	peer, _ := d.startPeer(t, func(c *config.Config) { c.Roles = []string{config.RolePusher} })
	<-cancelled
	cancels, pushed := 0, 0
	for _, r := range results {
		switch r.status {
		case 200:
			cancels++
		case 409:
			pushed++
			if !strings.Contains(string(r.body), schemas.CodeInvalidOrderState) {
				t.Fatalf("cancel: %s", r.body)
			}
		default:
			t.Fatalf("cancel: %d %s", r.status, r.body)
		}
	}
	ids := make([]uuid.UUID, len(results))
	for i, r := range results {
		ids[i] = r.id
	}
	waitPushesSettled(t, d, ids...) // any (wrong) push has finished
	for _, r := range results {
		f := d.detail(t, d.client, r.id)
		if r.status == 200 {
			if f.Status != "CANCELLED" || f.PlatformOrderID != nil {
				t.Fatalf("cancelled order then %s (platform id %v)", f.Status, f.PlatformOrderID)
			}
			for _, a := range f.DeliveryAttempts {
				if a.Outcome != nil && *a.Outcome == "success" {
					t.Fatalf("cancelled order was pushed: %+v", a)
				}
			}
		} else {
			d.waitStatus(t, d.client, r.id, "SUCCESS")
		}
	}
	if n := peer.Simulator.Orders(d.store(t, "ACTIVE").ShopDomain); n != pushed {
		t.Fatalf("the platform received %d orders, %d were not cancelled", n, pushed)
	}
	t.Logf("cancel won %d times, push won %d times", cancels, pushed)
	checkStoreQueues(t, d)
}

// TestACallLeftByAStoppedPusherIsTakenOver: the pusher that sends a
// push's start_push makes the call once it is decided. One that stops in
// between leaves the job leased until its lease ends; then any pusher
// sends start_push again, is answered with the decision made, and calls.
// Here the job is leased and its start sent as a pusher would, with no
// pusher running; the lease's end is brought forward, and a pusher started
// then pushes the order once.
func TestACallLeftByAStoppedPusherIsTakenOver(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	o := create(t, d.client, tshirtOrder(v.VariantID, "taken-over", 1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const lease = 2 * time.Minute
	tx, err := d.app.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leased, err := jobs.Claim(ctx, tx, order.PushQueue, 1, lease, nil)
	if err != nil || len(leased) != 1 || leased[0].ID != o.OrderID || leased[0].Step != order.StepStart {
		t.Fatalf("leased %+v (%v); want the order's start", leased, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	bus := &order.Bus{Producer: d.app.Producer, Pool: d.app.Pool, Notify: d.app.Notify, Naming: d.app.Naming}
	start := order.Command{ID: order.JobCommandID(o.OrderID, order.KindStartPush, 1), Kind: order.KindStartPush, OrderID: o.OrderID}
	dec, err := bus.Decide(ctx, start, 20*time.Second)
	if err != nil || !dec.Accepted() || dec.Status != schemas.StatusProcessing {
		t.Fatalf("start_push: %+v, %v", dec, err)
	}
	var step string
	var wait time.Duration
	if err := d.app.Pool.QueryRow(ctx, `SELECT step, due_at - now() FROM jobs WHERE queue = $1 AND id = $2`,
		order.PushQueue, o.OrderID).Scan(&step, &wait); err != nil {
		t.Fatal(err)
	}
	if step != order.StepStart || wait < lease/2 {
		t.Fatalf("after the start the job is at step %s, due in %s; want it still leased at %s, due in about %s", step, wait, order.StepStart, lease)
	}
	if _, err := d.app.Pool.Exec(ctx, `UPDATE jobs SET due_at = now() WHERE queue = $1 AND id = $2`, order.PushQueue, o.OrderID); err != nil {
		t.Fatal(err)
	}
	peer, _ := d.startPeer(t, func(c *config.Config) { c.Roles = []string{config.RolePusher} })
	got := d.waitStatus(t, d.client, o.OrderID, "SUCCESS")
	if n := peer.Simulator.Orders(d.store(t, "ACTIVE").ShopDomain); n != 1 || got.PlatformOrderID == nil {
		t.Fatalf("the platform received %d orders (platform id %v), want 1", n, got.PlatformOrderID)
	}
	if len(got.DeliveryAttempts) != 1 {
		t.Fatalf("%d push attempts, want 1: %+v", len(got.DeliveryAttempts), got.DeliveryAttempts)
	}
}

// Finding: a takeover's start_push is announced with its first decision,
// PROCESSING, even when the decider reaches it behind the attempt's failure
// (sent by the worker before) and a cancel: the new worker pushed a
// cancelled order.
// A takeover whose attempt ended meanwhile makes no call.
func TestATakeoverAfterTheAttemptEndedMakesNoCall(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	o := create(t, d.client, tshirtOrder(v.VariantID, "overtaken", 1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var payload []byte
	if err := d.app.Pool.QueryRow(ctx, `SELECT payload FROM jobs WHERE queue = $1 AND id = $2`, order.PushQueue, o.OrderID).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	// The first worker's start and its call's failure, then the client's
	// cancel, are decided.
	bus := &order.Bus{Producer: d.app.Producer, Pool: d.app.Pool, Notify: d.app.Notify, Naming: d.app.Naming}
	for _, c := range []order.Command{
		{ID: order.JobCommandID(o.OrderID, order.KindStartPush, 1), Kind: order.KindStartPush, OrderID: o.OrderID},
		{ID: order.JobCommandID(o.OrderID, order.KindFailPush, 1), Kind: order.KindFailPush, OrderID: o.OrderID, Attempt: 1, Error: "platform unavailable"},
	} {
		if dec, err := bus.Decide(ctx, c, 20*time.Second); err != nil || !dec.Accepted() {
			t.Fatalf("%s: %+v, %v", c.Kind, dec, err)
		}
	}
	if r := d.client.Do("POST", "/v1/orders/pod/"+o.OrderID.String()+"/cancel", nil); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	// A second worker had leased the job at its start before the decider
	// caught up: its lease holds the job as it was then.
	if _, err := d.app.Pool.Exec(ctx, `INSERT INTO jobs (queue, id, step, attempt, due_at, payload) VALUES ($1, $2, $3, 1, now(), $4)
		ON CONFLICT (id, queue) DO UPDATE SET step = excluded.step, attempt = 1, due_at = now(), payload = excluded.payload`,
		order.PushQueue, o.OrderID, order.StepStart, payload); err != nil {
		t.Fatal(err)
	}
	logs := &capturedLogs{}
	peer := startWithLogger(t, d.peerConfig(t, func(c *config.Config) { c.Roles = []string{config.RolePusher} }),
		slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	domain := d.store(t, "ACTIVE").ShopDomain
	testenv.Eventually(t, 30*time.Second, func() error {
		if peer.Simulator.Orders(domain) > 0 {
			return nil // called: failed below
		}
		for _, l := range logs.lines(t) {
			if l["msg"] == "a taken-over push whose attempt ended meanwhile; no call" && l["order"] == o.OrderID.String() {
				return nil
			}
		}
		return fmt.Errorf("the taken-over start has not been seen through yet")
	})
	if n := peer.Simulator.Orders(domain); n != 0 {
		t.Fatalf("the platform received %d orders for a cancelled order", n)
	}
	if got := d.waitStatus(t, d.client, o.OrderID, "CANCELLED"); got.PlatformOrderID != nil {
		t.Fatalf("a cancelled order with a platform id: %+v", got)
	}
}

func TestConcurrentCreatesOneReference(t *testing.T) {
	d := startDemo(t, noPusher)
	// A second instance on the same database and broker.
	_, c2 := d.startPeer(t)
	d.waitJoined(t, 2, "order-decider", orderrm.ConsumerName)
	clients := []*testenv.Client{d.client, c2}
	v := d.variant(t, "ACTIVE", "tshirt")
	const n = 50
	statuses := make([]int, n)
	codes := make([]string, n)
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := tshirtOrder(v.VariantID, "same-ref", 1)
			body["note"] = fmt.Sprintf("attempt %d", i) // different content: only the reference collides
			r := clients[i%2].Do("POST", "/v1/orders/pod", body)
			statuses[i], bodies[i] = r.Status, r.Body
			if r.Status != 201 {
				codes[i] = r.Err(t).Error
			}
		}()
	}
	wg.Wait()
	won := 0
	for i := range n {
		switch {
		case statuses[i] == 201:
			won++
		case statuses[i] == 409 && codes[i] == schemas.CodeDuplicateReference:
			if strings.Contains(string(bodies[i]), "order_id") {
				t.Errorf("409 carries an order: %s", bodies[i])
			}
		default:
			t.Errorf("create %d: %d %s", i, statuses[i], bodies[i])
		}
	}
	if won != 1 {
		t.Fatalf("%d creates won, want exactly 1", won)
	}
	var page struct{ Data []orderrm.Order }
	d.client.Get("/v1/orders/pod").JSON(t, &page)
	if len(page.Data) != 1 {
		t.Fatalf("%d orders listed", len(page.Data))
	}
	t.Logf("%d concurrent creates on 2 instances: 1 × 201, %d × 409 DUPLICATE_REFERENCE_ID", n, n-1)
}

func TestSoftDuplicateAndIdempotencyKey(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	first := create(t, d.client, tshirtOrder(v.VariantID, "soft-1", 3))
	body := tshirtOrder(v.VariantID, "soft-2", 3)
	body["line_items"].([]any)[0].(map[string]any)["sides"] = map[string]any{"front_side": "https://img.example.com/soft-1.png"}
	r := d.client.Do("POST", "/v1/orders/pod", body)
	if r.Status != 409 {
		t.Fatalf("soft duplicate: %d %s", r.Status, r.Body)
	}
	if e := r.Err(t); e.Error != schemas.CodeDuplicateOrder || e.Details["order_id"] != first.OrderID.String() {
		t.Fatalf("soft duplicate body: %s", r.Body)
	}
	body["force"] = true
	forced := create(t, d.client, body)
	if !forced.Duplicate {
		t.Fatalf("forced duplicate lacks duplicate:true")
	}
	// A different quantity is different content.
	create(t, d.client, tshirtOrder(v.VariantID, "soft-3", 4))

	key := uuid.NewString()
	b1, _ := json.Marshal(tshirtOrder(v.VariantID, "idem-1", 1))
	r1 := postWithKey(t, d.client, "/v1/orders/pod", key, b1)
	r2 := postWithKey(t, d.client, "/v1/orders/pod", key, b1)
	if r1.Status != 201 || r2.Status != 201 || string(r1.Body) != string(r2.Body) || r2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("idempotent replay:\n%d %s\n%d %s", r1.Status, r1.Body, r2.Status, r2.Body)
	}
	b3, _ := json.Marshal(tshirtOrder(v.VariantID, "idem-2", 1))
	r3 := postWithKey(t, d.client, "/v1/orders/pod", key, b3)
	if r3.Status != 422 || r3.Err(t).Error != schemas.CodeIdempotencyReused {
		t.Fatalf("key reused with another body: %d %s", r3.Status, r3.Body)
	}
	// Errors replay too (4xx are final answers).
	key2 := uuid.NewString()
	bad, _ := json.Marshal(tshirtOrder(v.VariantID, "idem-3", 0))
	e1, e2 := postWithKey(t, d.client, "/v1/orders/pod", key2, bad), postWithKey(t, d.client, "/v1/orders/pod", key2, bad)
	if e1.Status != 400 || string(e1.Body) != string(e2.Body) {
		t.Fatalf("error replay: %d %s / %d %s", e1.Status, e1.Body, e2.Status, e2.Body)
	}
}

// Requests racing with one Idempotency-Key: one runs, the others wait for
// its end (woken when it is kept) and replay its answer byte for byte;
// none is refused as still in progress, and one order exists.
func TestRacingRequestsWithOneIdempotencyKeyGetTheFirstAnswer(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	key := uuid.NewString()
	body, _ := json.Marshal(tshirtOrder(v.VariantID, "idem-race", 1))
	const n = 8
	answers := make([]testenv.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = postWithKey(t, d.client, "/v1/orders/pod", key, body)
		}()
	}
	wg.Wait()
	replayed := 0
	for i, r := range answers {
		if r.Status != 201 || string(r.Body) != string(answers[0].Body) {
			t.Fatalf("answer %d of %d: %d %s (first: %d %s)", i, n, r.Status, r.Body, answers[0].Status, answers[0].Body)
		}
		if r.Header.Get("Idempotent-Replayed") == "true" {
			replayed++
		}
	}
	if replayed != n-1 {
		t.Fatalf("%d of %d answers were replays, want %d", replayed, n, n-1)
	}
	var page struct{ Data []orderrm.Order }
	d.client.Get("/v1/orders/pod?limit=100").JSON(t, &page)
	if len(page.Data) != 1 || page.Data[0].ReferenceID != "idem-race" {
		t.Fatalf("the account has %d orders, want the one idem-race: %+v", len(page.Data), page.Data)
	}
}

func TestOrderTenantIsolation(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	o := create(t, d.client, tshirtOrder(v.VariantID, "tenant-1", 1))
	_, token := d.newAccount(t, "other-"+testenv.RandomSuffix())
	other := testenv.NewClient(t, d.client.Base, token)
	id := o.OrderID.String()
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/orders/pod/" + id}, {"GET", "/v1/orders/pod/" + id + "/queue"},
		{"POST", "/v1/orders/pod/" + id + "/retry"}, {"POST", "/v1/orders/pod/" + id + "/cancel"},
		{"GET", "/v1/orders/pod/" + uuid.NewString()}, {"POST", "/v1/orders/pod/" + uuid.NewString() + "/cancel"},
	} {
		r := other.Do(c.method, c.path, nil)
		if r.Status != 404 || r.Err(t).Error != schemas.CodeNotFound {
			t.Errorf("%s %s as another account: %d %s", c.method, c.path, r.Status, r.Body)
		}
	}
	var page struct{ Data []orderrm.Order }
	other.Get("/v1/orders/pod").JSON(t, &page)
	if len(page.Data) != 0 {
		t.Fatalf("another account lists %d orders", len(page.Data))
	}
	// Another account cannot order the demo account's variants either.
	r := other.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "tenant-2", 1))
	if r.Status != 400 || r.Err(t).Message != "variant_id not found" {
		t.Fatalf("foreign variant: %d %s", r.Status, r.Body)
	}
	// The order is still PENDING and cancellable by its owner.
	if r := d.client.Do("POST", "/v1/orders/pod/"+id+"/cancel", nil); r.Status != 200 {
		t.Fatalf("owner cancel: %d %s", r.Status, r.Body)
	}
}

// checkStoreQueues: the projector's per-store queue counts equal a count of
// the PENDING orders, every PENDING order's place is its rank, and the
// per-status counts equal a count of the orders (once the projection is
// idle).
func checkStoreQueues(t *testing.T, d demoEnv) {
	t.Helper()
	// Each check counts the rows that break it.
	checks := []struct{ what, query string }{
		{"stores whose queue count differs from their PENDING orders", `SELECT count(*) FROM (
			SELECT store_id, count(*) AS n FROM orders WHERE status = 'PENDING' GROUP BY store_id) c
			FULL JOIN store_queues q USING (store_id)
			WHERE coalesce(c.n, 0) <> coalesce(q.pending, 0)`},
		// A place as GETs read it (sequence, frontier, out-of-turn
		// departures) against the rank among the store's PENDING orders.
		{"PENDING orders whose queue place is not their rank", `SELECT count(*) FROM (
			SELECT o.queue_seq - q.frontier - (SELECT count(*) FROM unnest(q.departed) AS x(seq)
				WHERE x.seq < o.queue_seq) AS place,
				row_number() OVER (PARTITION BY o.store_id ORDER BY o.queue_seq) AS rank
			FROM orders o JOIN store_queues q USING (store_id) WHERE o.status = 'PENDING') p
			WHERE place <> rank`},
		{"statuses whose count (pod_orders) differs from the orders", `SELECT count(*) FROM (
			SELECT status, count(*) AS n FROM orders GROUP BY status) c
			FULL JOIN order_status_counts s USING (status)
			WHERE coalesce(c.n, 0) <> coalesce(s.n, 0)`},
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		for _, c := range checks {
			var bad int
			if err := d.app.Pool.QueryRow(context.Background(), c.query).Scan(&bad); err != nil {
				return err
			}
			if bad > 0 {
				return fmt.Errorf("%d %s", bad, c.what)
			}
		}
		return nil
	})
}
