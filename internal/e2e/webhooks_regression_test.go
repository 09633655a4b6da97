package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/delivery"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/testenv"
	deliveryrm "github.com/printpod/pod/projections/delivery"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A result of a resend run met before that run's task (the three topics are
// read in no fixed order) moves the delivery to that run: success.
func TestDeliveryLogResultBeforeTaskOfLaterRun(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	w := createWebhook(t, d.client, rc.url("/hooks"))
	ev := uuid.New()
	now := time.Now().UTC()
	task := demoTask(d, w.ID, ev, 2, json.RawMessage(`{"id":"x"}`), now)
	code := 200
	res := schemas.AttemptResult{DeliveryID: task.DeliveryID, WebhookID: w.ID, AccountID: d.app.DemoAccount, EventID: ev, Topic: task.Topic,
		Gen: 1, Run: 2, Attempt: 1, Attempted: true, Status: schemas.DeliverySuccess, StatusCode: &code, At: now, CreatedAt: now}
	task1 := task
	task1.Run = 1
	fail := "HTTP 500"
	code500 := 500
	res1 := res
	res1.Run, res1.Attempt, res1.Status, res1.StatusCode, res1.Error = 1, 7, schemas.DeliveryFailed, &code500, &fail
	tv, _ := json.Marshal(task)
	rv, _ := json.Marshal(res)
	t1v, _ := json.Marshal(task1)
	r1v, _ := json.Marshal(res1)
	// Log order per topic is kept (run 1 before run 2 on each topic); only
	// the interleaving of the two topics differs from the live order.
	recs := []*kgo.Record{
		{Topic: d.topic(schemas.TopicWebhookDeliveries), Value: t1v},
		{Topic: d.topic(schemas.TopicWebhookAttempts), Value: r1v},
		{Topic: d.topic(schemas.TopicWebhookAttempts), Value: rv},
		{Topic: d.topic(schemas.TopicWebhookDeliveries), Value: tv},
	}
	ctx := context.Background()
	tx, err := d.app.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deliveryrm.Projector(d.app.Naming, slog.Default()).Handle(ctx, tx, recs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var status string
	if err := d.app.Pool.QueryRow(ctx, `SELECT status FROM webhook_deliveries WHERE id = $1`, task.DeliveryID).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != schemas.DeliverySuccess {
		t.Fatalf("delivery is %q after its success result and its task (other order gives success)", status)
	}
}

// The same task twice on pod.webhook.deliveries (a fan-out batch done again
// after a crash) is attempted once.
func TestDeliveryTaskTwiceOnTheLogSentOnce(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	w := createWebhook(t, d.client, rc.url("/hooks"))
	ev := uuid.New()
	task := demoTask(d, w.ID, ev, 1, json.RawMessage(`{"id":"x"}`), time.Now().UTC())
	r1, _ := delivery.TaskRecord(d.topic(schemas.TopicWebhookDeliveries), task)
	r2, _ := delivery.TaskRecord(d.topic(schemas.TopicWebhookDeliveries), task)
	if err := d.app.Producer.ProduceSync(context.Background(), r1, r2).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitDeliveries(t, d.client, w.ID, 1, "success", 20*time.Second)
	waitCaughtUp(t, d, delivery.SenderGroup, schemas.TopicWebhookDeliveries) // the second copy is read too
	n := 0
	for _, g := range rc.requests() {
		if g.ID == ev.String() {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("event %s was sent %d times for one delivery id", ev, n)
	}
}

// A backlog of more tasks than the sender holds in memory (10000) for one
// slow endpoint does not stop a healthy endpoint's delivery: past 256
// waiting tasks an endpoint's further tasks are deferred to the first tier.
func TestDeliverySlowBacklogDoesNotStarveOthers(t *testing.T) {
	waitsMostly(t)
	slow, healthy := newReceiver(t), newReceiver(t)
	slow.delay = func(received) time.Duration { return 30 * time.Second }
	d := startDemo(t, allow(slow, healthy))
	ws := createWebhook(t, d.client, slow.url("/slow"))
	wh := createWebhook(t, d.client, healthy.url("/ok"))
	now := time.Now().UTC()
	mk := func(hook uuid.UUID) *kgo.Record {
		ev := uuid.New()
		r, _ := delivery.TaskRecord(d.topic(schemas.TopicWebhookDeliveries), demoTask(d, hook, ev, 1, json.RawMessage(`{}`), now))
		return r
	}
	var recs []*kgo.Record
	for range 10100 {
		recs = append(recs, mk(ws.ID))
	}
	if err := d.app.Producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The sender has read past the slow endpoint's 256 waiting tasks once
	// it defers some to a tier: only then does the healthy task arrive.
	waitTopicHolds(t, d, 1, schemas.WebhookRetryTiers...)
	if err := d.app.Producer.ProduceSync(context.Background(), mk(wh.ID)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, func() error {
		if len(healthy.requests()) == 0 {
			return fmt.Errorf("healthy endpoint got nothing; slow endpoint holds %d requests", slow.inFlight())
		}
		return nil
	})
	// The deferred tasks wait in the tier that covers the slow endpoint's
	// drain time (256 tasks at 30 s each, 8 at a time: 16 min, so the 30 m
	// tier), not in the first tier where they would come back to be
	// deferred again.
	deferredTo := func(topic string) int {
		n := 0
		readToEnd(t, d, topic, func(r *kgo.Record) {
			var task schemas.DeliveryTask
			if json.Unmarshal(r.Value, &task) == nil && task.WebhookID == ws.ID && task.Attempt == 1 {
				n++
			}
		})
		return n
	}
	if n := deferredTo(d.topic("pod.webhook.deliveries.retry.30m")); n == 0 {
		t.Errorf("no deferred task of the slow endpoint in the 30m tier")
	}
	if n := deferredTo(d.topic(schemas.WebhookRetryTiers[0])); n != 0 {
		t.Errorf("%d deferred tasks of the slow endpoint in the first tier", n)
	}
}

// TestEndpointsThatNeverAnswerHoldUpNoOtherEndpoint: three webhooks whose
// endpoints hold every request (within a timeout no run reaches) are sent
// more tasks than the sender holds in memory, then one task for a healthy
// endpoint, with as many request slots as one endpoint may use. None of
// the silent endpoints' requests ends, yet the sender finds them slow: it
// keeps a few of their tasks and defers the rest, so it reads on, and has
// one request out to each, so slots are left. The healthy endpoint gets
// its request within seconds.
func TestEndpointsThatNeverAnswerHoldUpNoOtherEndpoint(t *testing.T) {
	waitsMostly(t)
	silent, healthy := newReceiver(t), newReceiver(t)
	silent.delay = func(received) time.Duration { return time.Hour }
	defer silent.release()
	d := startDemo(t, allow(silent, healthy), func(c *config.Config) {
		c.WebhookTimeout, c.WebhookConcurrency, c.WebhookPerEndpoint = 2*time.Minute, 8, 8
	})
	var hooks []uuid.UUID
	for i := range 3 {
		hooks = append(hooks, createWebhook(t, d.client, silent.url(fmt.Sprintf("/silent/%d", i))).ID)
	}
	wh := createWebhook(t, d.client, healthy.url("/ok"))
	now := time.Now().UTC()
	var recs []*kgo.Record
	for i := range 10200 {
		r, _ := delivery.TaskRecord(d.topic(schemas.TopicWebhookDeliveries), demoTask(d, hooks[i%3], uuid.New(), 1, json.RawMessage(`{}`), now))
		recs = append(recs, r)
	}
	r, _ := delivery.TaskRecord(d.topic(schemas.TopicWebhookDeliveries), demoTask(d, wh.ID, uuid.New(), 1, json.RawMessage(`{}`), now))
	recs = append(recs, r)
	if err := d.app.Producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if len(healthy.requests()) == 0 {
			return fmt.Errorf("healthy endpoint got nothing; the silent ones hold %d requests", silent.inFlight())
		}
		return nil
	})
	if n := silent.inFlight(); n > len(hooks) {
		t.Errorf("%d requests out to %d endpoints that never answered; want one each", n, len(hooks))
	}
}

// A webhook create repeated under its Idempotency-Key after its answer was
// dropped (a 5xx is not kept) is the same command: it answers with the
// webhook and its secret, unless the decision is over a day old (the secret
// is shown once). After the key's window a repeat is a new webhook.
func TestWebhookSecretNotShownAfterIdempotencyWindow(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	body := []byte(`{"url":"` + rc.url("/x") + `","topics":["order.created"]}`)
	create := func() webhookJSON {
		t.Helper()
		r := postWithKey(t, d.client, "/v1/me/webhooks", "k-secret-1", body)
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		var w webhookJSON
		r.JSON(t, &w)
		return w
	}
	first := create()
	forgetKeys(t, d, false) // the answer, not the command seed
	if again := create(); again.ID != first.ID || again.Secret != first.Secret {
		t.Fatalf("repeat within the window: %+v, first %+v", again, first)
	}
	forgetKeys(t, d, false)
	if _, err := d.app.Pool.Exec(context.Background(), `UPDATE webhook_decisions SET decided_at = now() - interval '25 hours'`); err != nil {
		t.Fatal(err)
	}
	if late := create(); late.ID != first.ID || late.Secret != "" {
		t.Fatalf("repeat of a decision over a day old: %+v", late)
	}
	forgetKeys(t, d, true)
	if next := create(); next.ID == first.ID || next.Secret == "" {
		t.Fatalf("repeat after the window: %+v", next)
	}
}

// waitReceived waits for the receiver to get the event with id event.
func waitReceived(t *testing.T, rc *receiver, event uuid.UUID, timeout time.Duration) received {
	t.Helper()
	var got received
	testenv.Eventually(t, timeout, func() error {
		for _, g := range rc.requests() {
			if g.ID == event.String() {
				got = g
				return nil
			}
		}
		return fmt.Errorf("event %s not received yet", event)
	})
	return got
}

// A delivery sent after a rotation was answered is signed with the new
// secret (X-Webhook-Signature) and with both (webhook-signature), even when
// the sender read the webhook just before the rotation: its copy of the
// webhook must not outlive the answer. Each round reads the webhook with a
// delivery, rotates, and sends the next delivery at once.
func TestRotatedSecretSignsTheNextDelivery(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	w := createWebhook(t, d.client, rc.url("/hooks"))
	secret := w.Secret
	for round := 1; round <= 3; round++ {
		warm := sendTest(t, d.client, w.ID)
		if g := waitReceived(t, rc, warm.EventID, 20*time.Second); !verifyInterfaceSignature(secret, g.Timestamp, g.Body,
			g.Header.Get("X-Webhook-Signature")) {
			t.Fatalf("round %d: the delivery before the rotation is not signed with the current secret", round)
		}
		r := d.client.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/rotate-secret", nil)
		if r.Status != 200 {
			t.Fatalf("rotate: %d %s", r.Status, r.Body)
		}
		var rotated webhookJSON
		r.JSON(t, &rotated)
		if rotated.Secret == "" || rotated.Secret == secret {
			t.Fatalf("round %d: rotation answered secret %q", round, rotated.Secret)
		}
		next := sendTest(t, d.client, w.ID)
		g := waitReceived(t, rc, next.EventID, 20*time.Second)
		if !verifyInterfaceSignature(rotated.Secret, g.Timestamp, g.Body, g.Header.Get("X-Webhook-Signature")) {
			old := verifyInterfaceSignature(secret, g.Timestamp, g.Body, g.Header.Get("X-Webhook-Signature"))
			t.Fatalf("round %d: X-Webhook-Signature of the delivery after the rotation does not verify with the new secret (with the old one: %v)",
				round, old)
		}
		std := g.Header.Get("webhook-signature")
		if !verifyStandardSignature(rotated.Secret, g.Header.Get("webhook-id"), g.Header.Get("webhook-timestamp"), g.Body, std) {
			t.Fatalf("round %d: webhook-signature %q has no signature with the new secret", round, std)
		}
		if !verifyStandardSignature(secret, g.Header.Get("webhook-id"), g.Header.Get("webhook-timestamp"), g.Body, std) {
			t.Fatalf("round %d: webhook-signature %q has no signature with the previous secret", round, std)
		}
		secret = rotated.Secret
	}
}
