package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/delivery"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/secretbox"
	"github.com/printpod/pod/internal/testenv"
	deliveryrm "github.com/printpod/pod/projections/delivery"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

func webhookDelays(d ...time.Duration) func(*config.Config) {
	return func(c *config.Config) { c.WebhookRetryDelays = d }
}

func sendTest(t *testing.T, c *testenv.Client, id uuid.UUID) deliveryrm.Record {
	t.Helper()
	r := c.Do("POST", "/v1/me/webhooks/"+id.String()+"/test", nil)
	if r.Status != 202 {
		t.Fatalf("test delivery: %d %s", r.Status, r.Body)
	}
	var rec deliveryrm.Record
	r.JSON(t, &rec)
	return rec
}

func getDelivery(t *testing.T, c *testenv.Client, webhook, id uuid.UUID) deliveryrm.Record {
	t.Helper()
	r := c.Get("/v1/me/webhooks/" + webhook.String() + "/deliveries/" + id.String())
	if r.Status != 200 {
		t.Fatalf("get delivery: %d %s", r.Status, r.Body)
	}
	var rec deliveryrm.Record
	r.JSON(t, &rec)
	return rec
}

func waitDelivery(t *testing.T, c *testenv.Client, webhook, id uuid.UUID, timeout time.Duration, cond func(deliveryrm.Record) error) deliveryrm.Record {
	t.Helper()
	var rec deliveryrm.Record
	testenv.Eventually(t, timeout, func() error {
		rec = getDelivery(t, c, webhook, id)
		return cond(rec)
	})
	return rec
}

func hasStatus(status string, attempts int) func(deliveryrm.Record) error {
	return func(r deliveryrm.Record) error {
		if r.Status != status || (attempts > 0 && r.Attempts != attempts) {
			return fmt.Errorf("delivery is %s after %d attempts; waiting for %s", r.Status, r.Attempts, status)
		}
		return nil
	}
}

// failingWebhook starts the service with every retry wait step long, and
// creates a webhook whose endpoint answers code to every request.
func failingWebhook(t *testing.T, step time.Duration, code int) (*receiver, demoEnv, webhookJSON) {
	t.Helper()
	rc := newReceiver(t)
	rc.respond = func(received, int) int { return code }
	d := startDemo(t, allow(rc), webhookDelays(step, step, step, step, step, step))
	w := createWebhook(t, d.client, rc.url("/down"))
	rc.setSecret(w.Secret)
	return rc, d, w
}

// TestWebhookRetriesReachSevenAttempts runs the retry tiers with one-second
// waits against an endpoint answering 500: seven attempts with one event
// id, each after its tier's wait, then failed and on the DLQ. A manual
// resend starts a new run with the same event id.
func TestWebhookRetriesReachSevenAttempts(t *testing.T) {
	waitsMostly(t)
	rc := newReceiver(t)
	rc.respond = func(received, int) int { return 500 }
	d := startDemo(t, allow(rc), webhookDelays(time.Second, time.Second, time.Second, time.Second, time.Second, time.Second))
	w := createWebhook(t, d.client, rc.url("/failing"))
	rc.setSecret(w.Secret)
	rec := sendTest(t, d.client, w.ID)

	mid := waitDelivery(t, d.client, w.ID, rec.ID, 20*time.Second, func(r deliveryrm.Record) error {
		if r.Attempts < 2 {
			return fmt.Errorf("%d attempts", r.Attempts)
		}
		return nil
	})
	if mid.Status != "pending" || mid.NextRetryAt == nil || mid.LastStatusCode == nil || *mid.LastStatusCode != 500 ||
		mid.LastError == nil || *mid.LastError != "HTTP 500" {
		t.Errorf("delivery between attempts: %+v", mid)
	}
	final := waitDelivery(t, d.client, w.ID, rec.ID, 30*time.Second, hasStatus("failed", 7))
	if final.NextRetryAt != nil || final.DeliveredAt != nil || *final.LastStatusCode != 500 {
		t.Errorf("failed delivery: %+v", final)
	}

	got := rc.requests()
	if len(got) != 7 {
		t.Fatalf("receiver got %d attempts, want 7", len(got))
	}
	var gaps []float64
	for i, g := range got {
		if g.ID != rec.EventID.String() || !g.SigOK || !g.StdOK || string(g.Body) != string(rec.Payload) {
			t.Errorf("attempt %d: id %s (want %s), signatures %v/%v", i+1, g.ID, rec.EventID, g.SigOK, g.StdOK)
		}
		if i > 0 {
			gap := g.At.Sub(got[i-1].At)
			gaps = append(gaps, gap.Seconds())
			if gap < 950*time.Millisecond {
				t.Errorf("attempt %d came %s after attempt %d; its tier waits 1s", i+1, gap, i)
			}
		}
	}
	lo, hi, sum := math.Inf(1), 0.0, 0.0
	for _, g := range gaps {
		lo, hi, sum = math.Min(lo, g), math.Max(hi, g), sum+g
	}
	t.Logf("retry tier delay accuracy (configured 1s): min %.3fs, mean %.3fs, max %.3fs over %d waits", lo, sum/float64(len(gaps)), hi, len(gaps))

	// the failed delivery is on the DLQ, counted in the streak
	if w2 := getWebhook(t, d.client, w.ID); w2.ConsecutiveFailures != 1 || !w2.IsActive {
		t.Errorf("after one failed delivery: %+v", w2)
	}
	dlq := readTopic(t, d.app.Brokers, d.topic(schemas.TopicWebhookDLQ), 1)
	var task schemas.DeliveryTask
	if err := json.Unmarshal(dlq[0].Value, &task); err != nil || task.DeliveryID != rec.ID || task.Attempt != 7 || task.EventID != rec.EventID {
		t.Errorf("DLQ record %s (%v)", dlq[0].Value, err)
	}

	// resend: a new run, same event id; the endpoint now answers 200
	rc.mu.Lock()
	rc.respond = nil
	rc.mu.Unlock()
	r := d.client.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/deliveries/"+rec.ID.String()+"/resend", nil)
	var resent deliveryrm.Record
	r.JSON(t, &resent)
	if r.Status != 202 || resent.Status != "pending" || resent.ID != rec.ID || resent.EventID != rec.EventID {
		t.Fatalf("resend: %d %s", r.Status, r.Body)
	}
	r = d.client.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/deliveries/"+rec.ID.String()+"/resend", nil)
	if e := r.Err(t); r.Status != 409 || e.Error != schemas.CodeInvalidDeliveryState {
		t.Errorf("second resend while pending: %d %s", r.Status, r.Body)
	}
	done := waitDelivery(t, d.client, w.ID, rec.ID, 20*time.Second, hasStatus("success", 8))
	if done.DeliveredAt == nil || *done.LastStatusCode != 200 || done.LastError != nil {
		t.Errorf("resent delivery: %+v", done)
	}
	got = rc.requests()
	if len(got) != 8 || got[7].ID != rec.EventID.String() || got[7].Status != 200 {
		t.Errorf("after resend the receiver has %d requests", len(got))
	}
	if w2 := getWebhook(t, d.client, w.ID); w2.ConsecutiveFailures != 0 {
		t.Errorf("a success did not reset the streak: %d", w2.ConsecutiveFailures)
	}
}

// readTopic reads n records of topic from the start.
func readTopic(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	if n <= 0 {
		return out
	}
	if err := scanTopic(t, brokers, topic, 20*time.Second, func(r *kgo.Record) bool {
		out = append(out, r)
		return len(out) >= n
	}); err != nil {
		t.Fatalf("read %d of %d records of %s", len(out), n, topic)
	}
	return out
}

// TestWebhookAutoDisableAtTen fails ten deliveries in a row: the webhook is
// disabled (too_many_failures) with consecutive_failures 10, a delivery
// still pending then is cancelled and not counted, and a re-activation
// starts from 0.
func TestWebhookAutoDisableAtTen(t *testing.T) {
	waitsMostly(t)
	rc, d, w := failingWebhook(t, 30*time.Millisecond, 503)

	var first []deliveryrm.Record
	for range 9 {
		first = append(first, sendTest(t, d.client, w.ID))
	}
	for _, rec := range first {
		waitDelivery(t, d.client, w.ID, rec.ID, 30*time.Second, hasStatus("failed", 7))
	}
	if w2 := getWebhook(t, d.client, w.ID); w2.ConsecutiveFailures != 9 || !w2.IsActive {
		t.Fatalf("after 9 failed deliveries: %+v", w2)
	}

	// A slow one (each attempt held 3 s, its seven 21 s) is still pending
	// when the tenth delivery fails: the tenth's seven attempts cross the
	// retry tiers six times, seconds on a loaded real cluster.
	slow := sendTest(t, d.client, w.ID)
	rc.mu.Lock()
	rc.delay = func(r received) time.Duration {
		if r.ID == slow.EventID.String() {
			return 3 * time.Second
		}
		return 0
	}
	rc.mu.Unlock()
	tenth := sendTest(t, d.client, w.ID)
	waitDelivery(t, d.client, w.ID, tenth.ID, 30*time.Second, hasStatus("failed", 7))

	var off webhookJSON
	testenv.Eventually(t, 20*time.Second, func() error {
		off = getWebhook(t, d.client, w.ID)
		if off.IsActive {
			return fmt.Errorf("still active with %d failures", off.ConsecutiveFailures)
		}
		return nil
	})
	if off.DisabledReason == nil || *off.DisabledReason != "too_many_failures" || off.ConsecutiveFailures != 10 {
		t.Errorf("auto-disabled webhook: %+v", off)
	}
	cancelled := waitDelivery(t, d.client, w.ID, slow.ID, 20*time.Second, hasStatus("cancelled", 0))
	if cancelled.LastError == nil || *cancelled.LastError != "webhook_disabled" || cancelled.NextRetryAt != nil {
		t.Errorf("pending delivery of the disabled webhook: %+v", cancelled)
	}
	// Once the slow delivery's attempt in flight has finished and its
	// result is applied, it stays cancelled and the streak stays 10.
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := rc.inFlight(); n > 0 {
			return fmt.Errorf("%d requests in flight", n)
		}
		return nil
	})
	waitCaughtUp(t, d, delivery.SenderGroup, append([]string{schemas.TopicWebhookDeliveries}, schemas.WebhookRetryTiers...)...)
	waitCaughtUp(t, d, deliveryrm.ConsumerName, schemas.TopicWebhookAttempts)
	if again := getDelivery(t, d.client, w.ID, slow.ID); again.Status != "cancelled" {
		t.Errorf("cancelled delivery became %s", again.Status)
	}
	if w2 := getWebhook(t, d.client, w.ID); w2.ConsecutiveFailures != 10 {
		t.Errorf("streak %d after the cancelled delivery, want 10", w2.ConsecutiveFailures)
	}
	r := d.client.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/test", nil)
	if e := r.Err(t); r.Status != 400 || e.Error != schemas.CodeWebhookInactive {
		t.Errorf("test on the disabled webhook: %d %s", r.Status, r.Body)
	}

	// re-activation: counter 0, reason cleared, deliveries flow again
	r = d.client.Do("PATCH", "/v1/me/webhooks/"+w.ID.String(), map[string]any{"is_active": true})
	var on webhookJSON
	r.JSON(t, &on)
	if r.Status != 200 || !on.IsActive || on.ConsecutiveFailures != 0 || on.DisabledReason != nil {
		t.Fatalf("re-activate: %d %s", r.Status, r.Body)
	}
	rc.mu.Lock()
	rc.respond = nil
	rc.mu.Unlock()
	ok := sendTest(t, d.client, w.ID)
	waitDelivery(t, d.client, w.ID, ok.ID, 20*time.Second, hasStatus("success", 1))
	// the cancelled delivery can be resent now
	r = d.client.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/deliveries/"+slow.ID.String()+"/resend", nil)
	if r.Status != 202 {
		t.Fatalf("resend cancelled: %d %s", r.Status, r.Body)
	}
	waitDelivery(t, d.client, w.ID, slow.ID, 20*time.Second, hasStatus("success", 0))
}

// TestWebhookSlowEndpointDoesNotDelayOthers gives one client two webhooks:
// one endpoint holds every request until the test has looked, the other
// answers at once. Every delivery to the healthy one succeeds while the
// slow one's first requests are still being held.
func TestWebhookSlowEndpointDoesNotDelayOthers(t *testing.T) {
	waitsMostly(t)
	slow, healthy := newReceiver(t), newReceiver(t)
	// The slow endpoint holds every request until the test has looked,
	// within a webhook timeout no run comes near: with the default 10 s, a
	// slow real cluster could take longer than that to deliver the healthy
	// endpoint's 18, and a slow request timed out would count as finished.
	slow.delay = func(received) time.Duration { return time.Hour }
	defer slow.release()
	d := startDemo(t, allow(slow, healthy), func(c *config.Config) { c.WebhookTimeout = 2 * time.Minute })
	ws := createWebhook(t, d.client, slow.url("/slow"))
	wh := createWebhook(t, d.client, healthy.url("/ok"))
	healthy.setSecret(wh.Secret)
	slow.setSecret(ws.Secret)

	v := d.variant(t, "ACTIVE", "tshirt")
	const orders = 6
	for i := range orders {
		r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, fmt.Sprintf("slow-%s-%d", uuid.NewString()[:6], i), 1))
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
	}
	// order.created + PROCESSING + SUCCESS per order
	recs := waitDeliveries(t, d.client, wh.ID, orders*3, "success", time.Minute)
	held := slow.inFlight()
	if done := len(slow.requests()); done != 0 || held == 0 {
		t.Fatalf("slow endpoint: %d requests finished, %d held, when the healthy one had all %d", done, held, len(recs))
	}
	for _, r := range recs {
		if r.Attempts != 1 {
			t.Errorf("healthy delivery %s took %d attempts", r.ID, r.Attempts)
		}
	}
	t.Logf("healthy endpoint received %d deliveries while the slow one held %d requests", len(healthy.requests()), held)
}

// TestDeliveryLogSweeper removes delivery logs older than the retention.
func TestDeliveryLogSweeper(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	w := createWebhook(t, d.client, rc.url("/sweep"))
	old := sendTest(t, d.client, w.ID)
	fresh := sendTest(t, d.client, w.ID)
	waitDeliveries(t, d.client, w.ID, 2, "success", 20*time.Second)
	ctx := context.Background()
	if _, err := d.app.Pool.Exec(ctx, `UPDATE webhook_deliveries SET created_at = now() - interval '31 days' WHERE id = $1`, old.ID); err != nil {
		t.Fatal(err)
	}
	n, err := deliveryrm.Sweep(ctx, d.app.Pool, d.cfg.DeliveryRetention)
	if err != nil || n != 1 {
		t.Fatalf("sweep removed %d (%v), want 1", n, err)
	}
	if r := d.client.Get("/v1/me/webhooks/" + w.ID.String() + "/deliveries/" + old.ID.String()); r.Status != 404 {
		t.Errorf("swept delivery: %d", r.Status)
	}
	getDelivery(t, d.client, w.ID, fresh.ID)
}

// TestWebhookAutoDisableIsDecidedOnce fails many deliveries of one
// endpoint at once, well past the limit: the webhook is disabled once, and
// pod_webhook_auto_disabled_total counts one webhook, not one per failed
// delivery past the tenth.
func TestWebhookAutoDisableIsDecidedOnce(t *testing.T) {
	// Every delivery takes its 7 attempts ~2 s, longer than sending them
	// all, so dozens fail within moments of each other.
	_, d, w := failingWebhook(t, 300*time.Millisecond, 503)
	// Send until the webhook is disabled (on a real cluster sending is
	// slower, and the first failures can disable it before all 40 are in).
	var sent []deliveryrm.Record
	for range 40 {
		r := d.client.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/test", nil)
		if r.Status == 400 && r.Err(t).Error == schemas.CodeWebhookInactive {
			break
		}
		if r.Status != 202 {
			t.Fatalf("test delivery: %d %s", r.Status, r.Body)
		}
		var rec deliveryrm.Record
		r.JSON(t, &rec)
		sent = append(sent, rec)
	}
	failed := 0
	for _, rec := range sent {
		got := waitDelivery(t, d.client, w.ID, rec.ID, 60*time.Second, func(r deliveryrm.Record) error {
			if r.Status == "failed" || r.Status == "cancelled" {
				return nil
			}
			return fmt.Errorf("delivery is %s", r.Status)
		})
		if got.Status == "failed" {
			failed++
		}
	}
	if failed <= delivery.FailureLimit {
		t.Logf("only %d deliveries failed before the disable landed; the race this guards is not exercised", failed)
	}
	if off := getWebhook(t, d.client, w.ID); off.IsActive {
		t.Fatalf("webhook still active after %d failed deliveries", failed)
	}
	if n := series(scrape(t, d.app.Addr()), "pod_webhook_auto_disabled_total")[""]; n != 1 {
		t.Fatalf("pod_webhook_auto_disabled_total = %v after %d failed deliveries of one webhook, want 1", n, failed)
	}
}

// TestAnAutoDisableLostInACrashIsSentByTheNextFailure starts from what a
// sender killed right after counting the tenth failure in a row leaves: a
// streak of 10, no disable command on the log, and (from the release that
// claimed the disable in Redis before sending it) that claim held. The
// next failed delivery must disable the webhook.
func TestAnAutoDisableLostInACrashIsSentByTheNextFailure(t *testing.T) {
	_, d, w := failingWebhook(t, 30*time.Millisecond, 503)
	ctx := context.Background()
	const gen = 1 // a new webhook's activation generation
	for range delivery.FailureLimit {
		d.app.Streaks.Fail(ctx, w.ID, gen, uuid.New(), 1)
	}
	claim := fmt.Sprintf("%swh:streak:%s:%d:disable", d.app.Config.RedisPrefix, w.ID, gen)
	if err := d.app.Redis.Set(ctx, claim, 1, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if w2 := getWebhook(t, d.client, w.ID); w2.ConsecutiveFailures != delivery.FailureLimit || !w2.IsActive {
		t.Fatalf("before the next failure: %+v", w2)
	}

	rec := sendTest(t, d.client, w.ID)
	waitDelivery(t, d.client, w.ID, rec.ID, 30*time.Second, hasStatus("failed", 7))
	testenv.Eventually(t, 20*time.Second, func() error {
		if off := getWebhook(t, d.client, w.ID); off.IsActive {
			return fmt.Errorf("still active with %d failures", off.ConsecutiveFailures)
		}
		return nil
	})
	if off := getWebhook(t, d.client, w.ID); off.DisabledReason == nil || *off.DisabledReason != "too_many_failures" {
		t.Errorf("disabled webhook: %+v", off)
	}
}

// TestRacingResendsMakeOneRun resends a failed delivery from eight requests
// at once. Each is answered 202, or 409 when it read the delivery pending
// again; however many were answered 202, the delivery gets one new run:
// one more request to the endpoint, with the same event id.
func TestRacingResendsMakeOneRun(t *testing.T) {
	rc, d, w := failingWebhook(t, 30*time.Millisecond, 500)
	rec := sendTest(t, d.client, w.ID)
	waitDelivery(t, d.client, w.ID, rec.ID, 30*time.Second, hasStatus("failed", 7))
	rc.mu.Lock()
	rc.respond = nil
	rc.mu.Unlock()

	statuses := make([]int, 8)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = d.client.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/deliveries/"+rec.ID.String()+"/resend", nil).Status
		}()
	}
	wg.Wait()
	accepted := 0
	for _, s := range statuses {
		switch s {
		case 202:
			accepted++
		case 409:
		default:
			t.Errorf("a resend answered %d", s)
		}
	}
	if accepted == 0 {
		t.Fatalf("no resend was accepted: %v", statuses)
	}
	waitDelivery(t, d.client, w.ID, rec.ID, 20*time.Second, hasStatus("success", 8))
	waitCaughtUp(t, d, delivery.SenderGroup, append([]string{schemas.TopicWebhookDeliveries}, schemas.WebhookRetryTiers...)...)
	got := rc.requests()
	if len(got) != 8 || got[7].ID != rec.EventID.String() {
		t.Errorf("the endpoint got %d requests, want 7 and one resent", len(got))
	}
	t.Logf("%d of %d racing resends answered 202", accepted, len(statuses))
}

// TestAWebhookWhoseSecretWillNotOpenFailsItsDeliveriesAndHoldsUpNoOther:
// a webhook whose stored secret was sealed with a key the service no
// longer has (a key ring changed too early) cannot sign a request. Each
// attempt is recorded as not made (attempts counts those made), with the
// error signing_secret_unavailable, and retried through the tiers until
// the delivery fails and goes to the dead-letter topic; nothing is sent to
// the endpoint and its failure streak is kept, as the fault is the
// service's.
// Another webhook's deliveries go on meanwhile. A rotation gives the
// webhook a secret the service can open, and a resend then delivers.
func TestAWebhookWhoseSecretWillNotOpenFailsItsDeliveriesAndHoldsUpNoOther(t *testing.T) {
	waitsMostly(t)
	rc := newReceiver(t)
	d := startDemo(t, allow(rc), webhookDelays(time.Second, time.Second, time.Second, time.Second, time.Second, time.Second))
	sealed := createWebhook(t, d.client, rc.url("/sealed"))
	other := createWebhook(t, d.client, rc.url("/other"))
	rc.setSecret(other.Secret)
	lostKey, err := secretbox.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	unreadable, err := lostKey.Seal(sealed.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.app.Pool.Exec(context.Background(), `UPDATE webhooks SET secret = $2 WHERE id = $1`, sealed.ID, unreadable); err != nil {
		t.Fatal(err)
	}

	rec := sendTest(t, d.client, sealed.ID)
	for range 3 {
		if g := waitReceived(t, rc, sendTest(t, d.client, other.ID).EventID, 20*time.Second); !g.SigOK {
			t.Errorf("the other webhook's delivery is not signed with its secret")
		}
	}
	mid := waitDelivery(t, d.client, sealed.ID, rec.ID, 20*time.Second, func(r deliveryrm.Record) error {
		if r.LastError == nil {
			return fmt.Errorf("delivery %s with no error yet", r.Status)
		}
		return nil
	})
	if mid.Status == "success" || mid.Attempts != 0 || mid.LastStatusCode != nil || *mid.LastError != delivery.FailureUnsigned ||
		(mid.Status == "pending") != (mid.NextRetryAt != nil) {
		t.Errorf("delivery between attempts: %+v", mid)
	}
	final := waitDelivery(t, d.client, sealed.ID, rec.ID, 30*time.Second, hasStatus("failed", 0))
	if final.Attempts != 0 || final.DeliveredAt != nil || final.LastError == nil || *final.LastError != delivery.FailureUnsigned {
		t.Errorf("failed delivery: %+v", final)
	}
	for _, g := range rc.requests() {
		if g.ID == rec.EventID.String() {
			t.Fatalf("a request unsigned or signed with no secret reached the endpoint: %+v", g)
		}
	}
	if w := getWebhook(t, d.client, sealed.ID); w.ConsecutiveFailures != 0 || !w.IsActive {
		t.Errorf("the service's own failure counted against the endpoint: %+v", w)
	}
	dlq := readTopic(t, d.app.Brokers, d.topic(schemas.TopicWebhookDLQ), 1)
	var task schemas.DeliveryTask
	if err := json.Unmarshal(dlq[0].Value, &task); err != nil || task.DeliveryID != rec.ID || task.Attempt != 7 {
		t.Errorf("DLQ record %s (%v)", dlq[0].Value, err)
	}

	r := d.client.Do("POST", "/v1/me/webhooks/"+sealed.ID.String()+"/rotate-secret", nil)
	if r.Status != 200 {
		t.Fatalf("rotate: %d %s", r.Status, r.Body)
	}
	var rotated webhookJSON
	r.JSON(t, &rotated)
	rc.setSecret(rotated.Secret)
	if r := d.client.Do("POST", "/v1/me/webhooks/"+sealed.ID.String()+"/deliveries/"+rec.ID.String()+"/resend", nil); r.Status != 202 {
		t.Fatalf("resend: %d %s", r.Status, r.Body)
	}
	if g := waitReceived(t, rc, rec.EventID, 20*time.Second); !g.SigOK || !g.StdOK {
		t.Errorf("the resent delivery after the rotation: signatures %v/%v", g.SigOK, g.StdOK)
	}
	waitDelivery(t, d.client, sealed.ID, rec.ID, 20*time.Second, hasStatus("success", 1))
}
