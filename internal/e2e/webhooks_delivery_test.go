package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/delivery"
	"github.com/printpod/pod/internal/testenv"
	deliveryrm "github.com/printpod/pod/projections/delivery"
	"github.com/printpod/pod/schemas"
)

// webhookJSON is a Webhook (with secret) as the API answers it.
type webhookJSON struct {
	ID                  uuid.UUID `json:"id"`
	URL                 string    `json:"url"`
	Description         *string   `json:"description"`
	Topics              []string  `json:"topics"`
	IsActive            bool      `json:"is_active"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	DisabledReason      *string   `json:"disabled_reason"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
	Secret              string    `json:"secret"`
}

var allTopics = []string{"order.created", "order.status_updated", "order.cancelled", "tracking.created", "tracking.updated"}

func createWebhook(t testing.TB, c *testenv.Client, url string, topics ...string) webhookJSON {
	t.Helper()
	if len(topics) == 0 {
		topics = allTopics
	}
	r := c.Do("POST", "/v1/me/webhooks", map[string]any{"url": url, "topics": topics})
	if r.Status != 201 {
		t.Fatalf("create webhook: %d %s", r.Status, r.Body)
	}
	var w webhookJSON
	r.JSON(t, &w)
	return w
}

func getWebhook(t testing.TB, c *testenv.Client, id uuid.UUID) webhookJSON {
	t.Helper()
	r := c.Get("/v1/me/webhooks/" + id.String())
	if r.Status != 200 {
		t.Fatalf("get webhook: %d %s", r.Status, r.Body)
	}
	var w webhookJSON
	r.JSON(t, &w)
	return w
}

// demoTask is the first attempt of run of a delivery of event (topic
// order.created) to a webhook of the demo account, created and due at now.
func demoTask(d demoEnv, webhook, event uuid.UUID, run int, payload json.RawMessage, now time.Time) schemas.DeliveryTask {
	return schemas.DeliveryTask{DeliveryID: delivery.DeliveryID(webhook, event), WebhookID: webhook, AccountID: d.app.DemoAccount,
		EventID: event, Topic: "order.created", Gen: 1, Run: run, Attempt: 1, DueAt: now, CreatedAt: now, Payload: payload}
}

// deliveries lists every delivery of a webhook (all pages).
func deliveries(t *testing.T, c *testenv.Client, id uuid.UUID, status string) []deliveryrm.Record {
	t.Helper()
	var out []deliveryrm.Record
	cursor := ""
	for {
		params := []string{"limit", "100"}
		if status != "" {
			params = append(params, "status", status)
		}
		if cursor != "" {
			params = append(params, "cursor", cursor)
		}
		r := c.Get("/v1/me/webhooks/" + id.String() + "/deliveries" + q(params...))
		if r.Status != 200 {
			t.Fatalf("deliveries: %d %s", r.Status, r.Body)
		}
		var page struct {
			Data       []deliveryrm.Record `json:"data"`
			NextCursor *string             `json:"next_cursor"`
		}
		r.JSON(t, &page)
		out = append(out, page.Data...)
		if page.NextCursor == nil {
			return out
		}
		cursor = *page.NextCursor
	}
}

// waitDeliveries waits until the webhook has n deliveries, all with status.
func waitDeliveries(t *testing.T, c *testenv.Client, id uuid.UUID, n int, status string, timeout time.Duration) []deliveryrm.Record {
	t.Helper()
	var recs []deliveryrm.Record
	testenv.Eventually(t, timeout, func() error {
		recs = deliveries(t, c, id, "")
		done := 0
		for _, r := range recs {
			if r.Status == status {
				done++
			}
		}
		if len(recs) != n || done != n {
			return fmt.Errorf("%d deliveries, %d %s, want %d", len(recs), done, status, n)
		}
		return nil
	})
	return recs
}

func TestWebhookDeliversSignedEvents(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	w := createWebhook(t, d.client, rc.url("/hooks"))
	rc.setSecret(w.Secret)

	v := d.variant(t, "ACTIVE", "tshirt")
	r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "wh-"+uuid.NewString()[:8], 2))
	if r.Status != 201 {
		t.Fatalf("create order: %d %s", r.Status, r.Body)
	}
	var created struct {
		OrderID uuid.UUID `json:"order_id"`
	}
	r.JSON(t, &created)
	d.waitStatus(t, d.client, created.OrderID, schemas.StatusSuccess)
	// created, PENDING→PROCESSING, PROCESSING→SUCCESS
	events := orderEvents(t, d, created.OrderID, 3)
	recs := waitDeliveries(t, d.client, w.ID, 3, "success", 30*time.Second)

	got := rc.requests()
	if len(got) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(got))
	}
	byID := map[string]received{}
	for _, g := range got {
		if !g.SigOK {
			t.Errorf("X-Webhook-Signature of %s does not verify", g.ID)
		}
		if !g.StdOK {
			t.Errorf("webhook-signature of %s does not verify", g.ID)
		}
		if g.Header.Get("Content-Type") != "application/json" || g.Header.Get("User-Agent") == "" {
			t.Errorf("headers: %v", g.Header)
		}
		if g.Header.Get("webhook-id") != g.ID || g.Header.Get("webhook-timestamp") != g.Timestamp {
			t.Errorf("standard headers differ from the X- headers: %v", g.Header)
		}
		ts, _ := strconv.ParseInt(g.Timestamp, 10, 64)
		if d := time.Since(time.Unix(ts, 0)); d < -time.Minute || d > time.Minute {
			t.Errorf("timestamp %s is %s away from now", g.Timestamp, d)
		}
		var env struct {
			ID    string         `json:"id"`
			Topic string         `json:"topic"`
			Data  map[string]any `json:"data"`
		}
		if err := json.Unmarshal(g.Body, &env); err != nil {
			t.Fatal(err)
		}
		if env.ID != g.ID || env.Topic != g.Topic {
			t.Errorf("envelope id/topic %s/%s, headers %s/%s", env.ID, env.Topic, g.ID, g.Topic)
		}
		order, _ := env.Data["order"].(map[string]any)
		keys := make([]string, 0, len(order))
		for k := range order {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		want := []string{"client_status", "created_at", "id", "reference_id", "shipment_status", "store_id", "updated_at"}
		if !slices.Equal(keys, want) {
			t.Errorf("data.order fields %v, want %v", keys, want)
		}
		if _, ok := env.Data["tracking"]; !ok {
			t.Error("data.tracking missing")
		}
		if _, ok := env.Data["created"]; ok {
			t.Error("internal fields leak into the webhook payload")
		}
		byID[g.ID] = g
	}
	for _, ev := range events {
		g, ok := byID[ev.ID.String()]
		if !ok {
			t.Errorf("event %s %s was not delivered", ev.Type, ev.ID)
			continue
		}
		if g.Topic != ev.Type {
			t.Errorf("event %s delivered as %s, is %s", ev.ID, g.Topic, ev.Type)
		}
	}
	for _, rec := range recs {
		g := byID[rec.EventID.String()]
		if string(rec.Payload) != string(g.Body) {
			t.Errorf("delivery %s payload differs from the body sent:\n%s\n%s", rec.ID, rec.Payload, g.Body)
		}
		if rec.Attempts != 1 || rec.LastStatusCode == nil || *rec.LastStatusCode != 200 || rec.DeliveredAt == nil ||
			rec.NextRetryAt != nil || rec.LastError != nil || rec.WebhookID != w.ID {
			t.Errorf("delivery record %+v", rec)
		}
	}
}
