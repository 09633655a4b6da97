package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
	deliveryrm "github.com/printpod/pod/projections/delivery"
	"github.com/printpod/pod/schemas"
)

func TestWebhookManagement(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	c := d.client

	// topics
	r := c.Get("/v1/me/webhooks/topics")
	var topics struct{ Data []schemas.WebhookTopic }
	r.JSON(t, &topics)
	if r.Status != 200 || len(topics.Data) != 5 {
		t.Fatalf("topics: %d %s", r.Status, r.Body)
	}
	for i, tp := range topics.Data {
		if tp.Topic != allTopics[i] || tp.Description == "" {
			t.Errorf("topic %d: %+v", i, tp)
		}
	}

	// create: 201, secret once, whsec_ + base64 of 32 bytes
	r = c.Do("POST", "/v1/me/webhooks", map[string]any{"url": rc.url("/a"), "topics": []string{"order.created", "order.created", "tracking.updated"},
		"description": "orders to the ERP"})
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var w webhookJSON
	r.JSON(t, &w)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(w.Secret, "whsec_"))
	if !strings.HasPrefix(w.Secret, "whsec_") || err != nil || len(raw) != 32 {
		t.Errorf("secret %q is not whsec_ + base64 of 32 bytes", w.Secret)
	}
	if !w.IsActive || w.ConsecutiveFailures != 0 || w.DisabledReason != nil || *w.Description != "orders to the ERP" ||
		strings.Join(w.Topics, ",") != "order.created,tracking.updated" || w.URL != rc.url("/a") {
		t.Errorf("created webhook %+v", w)
	}
	var shape map[string]any
	r.JSON(t, &shape)
	if len(shape) != 10 {
		t.Errorf("create answer has %d fields, want the 9 Webhook fields + secret: %s", len(shape), r.Body)
	}

	// get and list: the nine fields, never the secret
	for _, path := range []string{"/v1/me/webhooks/" + w.ID.String(), "/v1/me/webhooks"} {
		r = c.Get(path)
		if r.Status != 200 || bytes.Contains(r.Body, []byte("whsec_")) || bytes.Contains(r.Body, []byte(`"secret"`)) {
			t.Errorf("GET %s: %d %s", path, r.Status, r.Body)
		}
	}
	r = c.Get("/v1/me/webhooks/" + w.ID.String())
	shape = nil
	r.JSON(t, &shape)
	if len(shape) != 9 {
		t.Errorf("GET webhook has %d fields, want 9: %s", len(shape), r.Body)
	}
	var list struct {
		Data       []webhookJSON `json:"data"`
		NextCursor *string       `json:"next_cursor"`
	}
	c.Get("/v1/me/webhooks").JSON(t, &list)
	if len(list.Data) != 1 || list.Data[0].ID != w.ID || list.NextCursor != nil {
		t.Errorf("list: %+v", list)
	}

	// the secret is sealed at rest
	var stored string
	if err := d.app.Pool.QueryRow(context.Background(), `SELECT secret FROM webhooks WHERE id = $1`, w.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, w.Secret) || strings.Contains(stored, strings.TrimPrefix(w.Secret, "whsec_")) {
		t.Errorf("secret stored in clear: %s", stored)
	}

	// patch each field
	patch := func(body any) (int, webhookJSON, []byte) {
		r := c.Do("PATCH", "/v1/me/webhooks/"+w.ID.String(), body)
		var out webhookJSON
		if r.Status == 200 {
			r.JSON(t, &out)
		}
		return r.Status, out, r.Body
	}
	if st, got, body := patch(map[string]any{"url": rc.url("/b"), "topics": []string{"order.cancelled"}, "description": nil}); st != 200 ||
		got.URL != rc.url("/b") || strings.Join(got.Topics, ",") != "order.cancelled" || got.Description != nil || !got.UpdatedAt.After(w.UpdatedAt) {
		t.Errorf("patch url/topics/description: %d %s", st, body)
	}
	if st, got, body := patch(map[string]any{"is_active": false}); st != 200 || got.IsActive || got.DisabledReason != nil {
		t.Errorf("patch is_active false: %d %s", st, body)
	}
	r = c.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/test", nil)
	if e := r.Err(t); r.Status != 400 || e.Error != schemas.CodeWebhookInactive {
		t.Errorf("test of an inactive webhook: %d %s", r.Status, r.Body)
	}
	if st, got, body := patch(map[string]any{"is_active": true}); st != 200 || !got.IsActive {
		t.Errorf("patch is_active true: %d %s", st, body)
	}

	// rotate: a new secret, shown once
	r = c.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/rotate-secret", nil)
	var rotated webhookJSON
	r.JSON(t, &rotated)
	if r.Status != 200 || !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.Secret == w.Secret {
		t.Errorf("rotate: %d %s", r.Status, r.Body)
	}

	// test delivery: 202 with a pending webhook.test record, then success
	// signed with the new secret (and the old one in webhook-signature).
	rc.setSecret(rotated.Secret)
	r = c.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/test", nil)
	var rec deliveryrm.Record
	r.JSON(t, &rec)
	if r.Status != 202 || rec.Topic != "webhook.test" || rec.Status != "pending" || rec.Attempts != 0 || rec.WebhookID != w.ID {
		t.Fatalf("test: %d %s", r.Status, r.Body)
	}
	var payload struct {
		ID   uuid.UUID `json:"id"`
		Data struct {
			Message   string    `json:"message"`
			WebhookID uuid.UUID `json:"webhook_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(rec.Payload, &payload); err != nil || payload.ID != rec.EventID || payload.Data.WebhookID != w.ID || payload.Data.Message == "" {
		t.Errorf("test payload %s", rec.Payload)
	}
	waitDeliveries(t, c, w.ID, 1, "success", 20*time.Second)
	filteredPagesResume(t, d, w.ID)
	got := rc.requests()
	if len(got) != 1 || !got[0].SigOK || !got[0].StdOK || got[0].Topic != "webhook.test" {
		t.Fatalf("test delivery received: %+v", got)
	}
	if n := len(strings.Fields(got[0].Header.Get("webhook-signature"))); n != 2 {
		t.Errorf("webhook-signature after a rotation carries %d signatures, want the new and the old", n)
	}
	rc.setSecret(w.Secret)
	if !verifyStandardSignature(w.Secret, got[0].ID, got[0].Timestamp, got[0].Body, got[0].Header.Get("webhook-signature")) {
		t.Error("the previous secret's Standard Webhooks signature is not there during the overlap")
	}
	if verifyInterfaceSignature(w.Secret, got[0].Timestamp, got[0].Body, got[0].Header.Get("X-Webhook-Signature")) {
		t.Error("X-Webhook-Signature still signed with the old secret")
	}

	// a delivery can be read by id; resend of a successful one is refused
	r = c.Get("/v1/me/webhooks/" + w.ID.String() + "/deliveries/" + rec.ID.String())
	if r.Status != 200 {
		t.Errorf("get delivery: %d %s", r.Status, r.Body)
	}
	r = c.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/deliveries/"+rec.ID.String()+"/resend", nil)
	if e := r.Err(t); r.Status != 409 || e.Error != schemas.CodeInvalidDeliveryState {
		t.Errorf("resend of a successful delivery: %d %s", r.Status, r.Body)
	}

	// another client sees none of it
	_, token := d.newAccount(t, "other-"+testenv.RandomSuffix())
	other := testenv.NewClient(t, c.Base, token)
	base := "/v1/me/webhooks/" + w.ID.String()
	for _, call := range []struct{ method, path string }{
		{"GET", base}, {"PATCH", base}, {"DELETE", base}, {"POST", base + "/rotate-secret"}, {"POST", base + "/test"},
		{"GET", base + "/deliveries"}, {"GET", base + "/deliveries/" + rec.ID.String()},
		{"POST", base + "/deliveries/" + rec.ID.String() + "/resend"},
	} {
		var body any
		if call.method == "PATCH" {
			body = map[string]any{"is_active": false}
		}
		r := other.Do(call.method, call.path, body)
		if e := r.Err(t); r.Status != 404 || e.Error != schemas.CodeNotFound {
			t.Errorf("other client %s %s: %d %s", call.method, call.path, r.Status, r.Body)
		}
	}
	other.Get("/v1/me/webhooks").JSON(t, &list)
	if len(list.Data) != 0 {
		t.Errorf("other client lists %d webhooks", len(list.Data))
	}

	// delete: 204, then 404 everywhere, its log gone
	r = c.Do("DELETE", base, nil)
	if r.Status != 204 || len(r.Body) != 0 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	for _, path := range []string{base, base + "/deliveries"} {
		if r := c.Get(path); r.Status != 404 {
			t.Errorf("GET %s after delete: %d", path, r.Status)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := d.app.Pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries WHERE webhook_id = $1`, w.ID).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("%d delivery rows of the deleted webhook", n)
		}
		return nil
	})
}

func TestWebhookValidationErrors(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	c := d.client
	w := createWebhook(t, c, rc.url("/v"))
	long := "https://example.com/" + strings.Repeat("a", 2030)
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, field        string
		message            string
	}{
		{"create empty object", "POST", "", map[string]any{}, 400, "VALIDATION_ERROR", "url", "url is required"},
		{"create no topics", "POST", "", map[string]any{"url": "https://example.com/h"}, 400, "VALIDATION_ERROR", "topics", "topics is required"},
		{"create empty topics", "POST", "", map[string]any{"url": "https://example.com/h", "topics": []string{}}, 400, "VALIDATION_ERROR", "topics", ""},
		{"create topics not array", "POST", "", map[string]any{"url": "https://example.com/h", "topics": "order.created"}, 400, "VALIDATION_ERROR", "topics", ""},
		{"create unknown topic", "POST", "", map[string]any{"url": "https://example.com/h", "topics": []string{"order.created", "order.shipped"}}, 400, "VALIDATION_ERROR", "topics[1]", ""},
		{"create test topic", "POST", "", map[string]any{"url": "https://example.com/h", "topics": []string{"webhook.test"}}, 400, "VALIDATION_ERROR", "topics[0]", ""},
		{"create topic not string", "POST", "", map[string]any{"url": "https://example.com/h", "topics": []any{7}}, 400, "VALIDATION_ERROR", "topics[0]", ""},
		{"create url not string", "POST", "", map[string]any{"url": 5, "topics": allTopics}, 400, "VALIDATION_ERROR", "url", "url must be a string"},
		{"create unknown field", "POST", "", map[string]any{"url": "https://example.com/h", "topics": allTopics, "secret": "x"}, 400, "VALIDATION_ERROR", "secret", ""},
		{"create is_active", "POST", "", map[string]any{"url": "https://example.com/h", "topics": allTopics, "is_active": false}, 400, "VALIDATION_ERROR", "is_active", ""},
		{"create description too long", "POST", "", map[string]any{"url": "https://example.com/h", "topics": allTopics, "description": strings.Repeat("d", 501)}, 400, "VALIDATION_ERROR", "description", ""},
		{"create not an object", "POST", "", []any{1}, 400, "VALIDATION_ERROR", "", ""},
		{"create malformed json", "POST", "", []byte(`{"url":`), 400, "VALIDATION_ERROR", "", ""},
		{"create private url", "POST", "", map[string]any{"url": "http://10.0.0.1/h", "topics": allTopics}, 400, "INVALID_WEBHOOK_URL", "url", ""},
		{"create localhost", "POST", "", map[string]any{"url": "http://localhost:9000/h", "topics": allTopics}, 400, "INVALID_WEBHOOK_URL", "url", ""},
		{"create long url", "POST", "", map[string]any{"url": long, "topics": allTopics}, 400, "INVALID_WEBHOOK_URL", "url", ""},
		{"create ftp", "POST", "", map[string]any{"url": "ftp://example.com/h", "topics": allTopics}, 400, "INVALID_WEBHOOK_URL", "url", ""},
		{"patch empty", "PATCH", "/" + w.ID.String(), map[string]any{}, 400, "VALIDATION_ERROR", "", ""},
		{"patch unknown field", "PATCH", "/" + w.ID.String(), map[string]any{"enabled": true}, 400, "VALIDATION_ERROR", "enabled", ""},
		{"patch is_active type", "PATCH", "/" + w.ID.String(), map[string]any{"is_active": "yes"}, 400, "VALIDATION_ERROR", "is_active", ""},
		{"patch private url", "PATCH", "/" + w.ID.String(), map[string]any{"url": "http://169.254.169.254/latest"}, 400, "INVALID_WEBHOOK_URL", "url", ""},
		{"patch decimal loopback", "PATCH", "/" + w.ID.String(), map[string]any{"url": "http://2130706433/h"}, 400, "INVALID_WEBHOOK_URL", "url", ""},
		{"patch mapped loopback", "PATCH", "/" + w.ID.String(), map[string]any{"url": "http://[::ffff:127.0.0.1]/h"}, 400, "INVALID_WEBHOOK_URL", "url", ""},
		{"patch topics empty", "PATCH", "/" + w.ID.String(), map[string]any{"topics": []string{}}, 400, "VALIDATION_ERROR", "topics", ""},
		{"patch missing webhook", "PATCH", "/" + uuid.NewString(), map[string]any{"is_active": true}, 404, "NOT_FOUND", "", ""},
		{"patch malformed id", "PATCH", "/not-a-uuid", map[string]any{"is_active": true}, 400, "VALIDATION_ERROR", "id", ""},
		{"get missing", "GET", "/" + uuid.NewString(), nil, 404, "NOT_FOUND", "", ""},
		{"delete missing", "DELETE", "/" + uuid.NewString(), nil, 404, "NOT_FOUND", "", ""},
		{"rotate missing", "POST", "/" + uuid.NewString() + "/rotate-secret", nil, 404, "NOT_FOUND", "", ""},
		{"test missing", "POST", "/" + uuid.NewString() + "/test", nil, 404, "NOT_FOUND", "", ""},
		{"deliveries missing", "GET", "/" + uuid.NewString() + "/deliveries", nil, 404, "NOT_FOUND", "", ""},
		{"deliveries bad status", "GET", "/" + w.ID.String() + "/deliveries?status=done", nil, 400, "VALIDATION_ERROR", "status", ""},
		{"deliveries bad limit", "GET", "/" + w.ID.String() + "/deliveries?limit=101", nil, 400, "VALIDATION_ERROR", "limit", ""},
		{"deliveries bad cursor", "GET", "/" + w.ID.String() + "/deliveries?cursor=abc", nil, 400, "VALIDATION_ERROR", "cursor", ""},
		{"list bad limit", "GET", "?limit=0", nil, 400, "VALIDATION_ERROR", "limit", ""},
		{"delivery missing", "GET", "/" + w.ID.String() + "/deliveries/" + uuid.NewString(), nil, 404, "NOT_FOUND", "", ""},
		{"resend missing", "POST", "/" + w.ID.String() + "/deliveries/" + uuid.NewString() + "/resend", nil, 404, "NOT_FOUND", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Do(tc.method, "/v1/me/webhooks"+tc.path, tc.body)
			if r.Status != tc.status {
				t.Fatalf("%d %s, want %d", r.Status, r.Body, tc.status)
			}
			e := r.Err(t)
			if e.Error != tc.code {
				t.Errorf("code %s, want %s (%s)", e.Error, tc.code, r.Body)
			}
			if f, _ := e.Details["field"].(string); f != tc.field {
				t.Errorf("details.field %q, want %q (%s)", f, tc.field, r.Body)
			}
			if tc.message != "" && e.Message != tc.message {
				t.Errorf("message %q, want %q", e.Message, tc.message)
			}
		})
	}
	// nothing was changed or created by any of them
	if got := getWebhook(t, c, w.ID); got.URL != w.URL || !got.IsActive || len(got.Topics) != 5 {
		t.Errorf("webhook changed by refused requests: %+v", got)
	}
	var list struct{ Data []webhookJSON }
	c.Get("/v1/me/webhooks").JSON(t, &list)
	if len(list.Data) != 1 {
		t.Errorf("%d webhooks after refused creates", len(list.Data))
	}
}

// TestWebhookLimitUnderConcurrency sends 12 creates at once through two API
// instances on one database and broker: the decider keyed by client lets
// exactly 5 through.
func TestWebhookLimitUnderConcurrency(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	_, second := d.startPeer(t, func(c *config.Config) {
		c.Roles = []string{"api"}
		c.DataDir = d.cfg.DataDir // as before: this peer shares the first instance's data directory
	})
	clients := []*testenv.Client{d.client, second}

	const n = 12
	statuses := make([]int, n)
	codes := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := clients[i%2].Do("POST", "/v1/me/webhooks", map[string]any{"url": rc.url(fmt.Sprintf("/%d", i)), "topics": allTopics})
			statuses[i] = r.Status
			if r.Status != 201 {
				var e testenv.ErrorBody
				_ = json.Unmarshal(r.Body, &e)
				codes[i] = e.Error
			}
		}()
	}
	wg.Wait()
	created, limited := 0, 0
	for i := range n {
		switch {
		case statuses[i] == 201:
			created++
		case statuses[i] == 400 && codes[i] == schemas.CodeWebhookLimitReached:
			limited++
		default:
			t.Errorf("create %d: %d %s", i, statuses[i], codes[i])
		}
	}
	if created != 5 || limited != n-5 {
		t.Fatalf("%d created, %d refused with WEBHOOK_LIMIT_REACHED; want 5 and %d", created, limited, n-5)
	}
	var list struct{ Data []webhookJSON }
	d.client.Get("/v1/me/webhooks").JSON(t, &list)
	if len(list.Data) != 5 {
		t.Fatalf("%d webhooks listed", len(list.Data))
	}
	// deleting one makes room for one
	if r := d.client.Do("DELETE", "/v1/me/webhooks/"+list.Data[0].ID.String(), nil); r.Status != 204 {
		t.Fatalf("delete: %d", r.Status)
	}
	createWebhook(t, d.client, rc.url("/again"))
	r := d.client.Do("POST", "/v1/me/webhooks", map[string]any{"url": rc.url("/sixth"), "topics": allTopics})
	if e := r.Err(t); r.Status != 400 || e.Error != schemas.CodeWebhookLimitReached {
		t.Errorf("sixth: %d %s", r.Status, r.Body)
	}
}

// TestWebhookSecretsStayOutOfLogsAndRedis runs the service with debug logs
// captured: no secret may appear in them, nor in Redis (where an
// Idempotency-Key keeps the create answer).
func TestWebhookSecretsStayOutOfLogsAndRedis(t *testing.T) {
	rc := newReceiver(t)
	cfg := podtest.Config(t)
	allow(rc)(&cfg)
	cfg.LogLevel = "debug"
	// A plain JSON handler, not the service's own logger: that one cuts
	// whsec_ secrets out, which would hide the leak looked for here.
	logs := &capturedLogs{}
	a := startWithLogger(t, cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx := context.Background()
	c := testenv.NewClient(t, "http://"+a.Addr(), cfg.DemoToken)

	r := c.Do("POST", "/v1/me/webhooks", map[string]any{"url": rc.url("/s"), "topics": allTopics})
	var w webhookJSON
	r.JSON(t, &w)
	first := postWithKey(t, c, "/v1/me/webhooks/"+w.ID.String()+"/rotate-secret", "rotate-1", nil)
	replay := postWithKey(t, c, "/v1/me/webhooks/"+w.ID.String()+"/rotate-secret", "rotate-1", nil)
	if first.Status != 200 || !bytes.Equal(first.Body, replay.Body) || replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("rotate replay: %d %s / %s", first.Status, first.Body, replay.Body)
	}
	var rotated webhookJSON
	first.JSON(t, &rotated)
	rc.setSecret(rotated.Secret)
	c.Do("POST", "/v1/me/webhooks/"+w.ID.String()+"/test", nil)
	testenv.Eventually(t, 20*time.Second, func() error {
		if len(rc.requests()) == 0 {
			return fmt.Errorf("no test delivery yet")
		}
		return nil
	})
	keys, err := a.Redis.Keys(ctx, cfg.RedisPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{w.Secret, rotated.Secret} {
		bare := strings.TrimPrefix(secret, "whsec_")
		if strings.Contains(logs.String(), bare) {
			t.Errorf("a webhook secret appears in the logs")
		}
		for _, k := range keys {
			if typ, _ := a.Redis.Type(ctx, k).Result(); typ != "string" {
				continue // streaks are numbers, done marks offsets
			}
			v, _ := a.Redis.Get(ctx, k).Result()
			if strings.Contains(v, bare) {
				t.Errorf("a webhook secret is kept in clear in Redis key %s", k)
			}
		}
	}
	idem := 0
	for _, k := range keys {
		if strings.Contains(k, "idem:") {
			idem++
		}
	}
	if idem == 0 {
		t.Error("no idempotency key kept in Redis; the check above saw nothing")
	}
	if n := strings.Count(logs.String(), "\n"); n < 5 {
		t.Fatalf("only %d log lines captured; the check above saw nothing", n)
	}
}

// TestWebhookURLGuardThroughAPI sends private and local targets in many
// spellings to create and to update: each is 400 INVALID_WEBHOOK_URL and
// nothing changes. (delivery/guard_test.go holds the full table, the
// connect-time resolution checks and the redirect rules.)
func TestWebhookURLGuardThroughAPI(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	w := createWebhook(t, d.client, rc.url("/guard"))
	urls := []string{
		"http://localhost/h", "http://LOCALHOST./h", "http://api.localhost/h", "http://127.0.0.1/h", "http://127.1/h",
		"http://2130706433/h", "http://0x7f000001/h", "http://0177.0.0.1/h", "http://017700000001/h", "http://0x7f.0.0.1/h",
		"http://127.0.0.1./h", "http://0/h", "http://0.0.0.0/h", "http://10.0.0.1/h", "http://10.1/h", "http://172.16.0.1/h",
		"http://172.31.255.255/h", "http://192.168.1.1/h", "http://0300.0250.0.1/h", "http://169.254.169.254/latest/meta-data",
		"http://100.64.0.1/h", "http://100.127.255.254/h", "http://[::1]/h", "http://[::]/h", "http://[::ffff:127.0.0.1]/h",
		"http://[::ffff:7f00:1]/h", "http://[0:0:0:0:0:ffff:127.0.0.1]/h", "http://[::ffff:a9fe:a9fe]/h", "http://[fc00::1]/h",
		"http://[fd12:3456::1]/h", "http://[fe80::1%25eth0]/h", "http://[fe80::1]/h", "http://[64:ff9b::a00:1]/h",
		"http://[2002:7f00:1::]/h", "http://user:pw@example.com/h", "ftp://example.com/h", "javascript:alert(1)", "//example.com/h",
		"http://192.0.2.1/h", "http://[3fff::1]/h", "http://[2001:db8::1]/h", "http://[::ffff:198.51.100.7]/h",
		"https://example.com/a b", "https://example.com/<h>", "https://example.com/h?a=\"x\"", "https://example.com/h%zz",
	}
	for _, u := range urls {
		for _, call := range []struct {
			method, path string
			body         map[string]any
		}{
			{"POST", "/v1/me/webhooks", map[string]any{"url": u, "topics": allTopics}},
			{"PATCH", "/v1/me/webhooks/" + w.ID.String(), map[string]any{"url": u}},
		} {
			r := d.client.Do(call.method, call.path, call.body)
			if r.Status != 400 {
				t.Errorf("%s %s accepted: %d %s", call.method, u, r.Status, r.Body)
				continue
			}
			if e := r.Err(t); e.Error != schemas.CodeInvalidWebhookURL || e.Details["field"] != "url" {
				t.Errorf("%s %s: %s", call.method, u, r.Body)
			}
		}
	}
	var list struct{ Data []webhookJSON }
	d.client.Get("/v1/me/webhooks").JSON(t, &list)
	if len(list.Data) != 1 || list.Data[0].URL != w.URL {
		t.Errorf("refused URLs changed something: %+v", list.Data)
	}
	if len(urls) < 30 {
		t.Fatalf("only %d spellings", len(urls))
	}
}

// filteredPagesResume: a failed delivery behind more deliveries than a
// filtered page looks through is found on a later page, by following
// next_cursor from a page that found none.
func filteredPagesResume(t *testing.T, d demoEnv, webhook uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	failed := uuid.New()
	if _, err := d.app.Pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id, topic, status, gen, created_at)
		SELECT $1, id, account_id, $1, 'order.created', 'failed', gen, now() - interval '2 hours' FROM webhooks WHERE id = $2`,
		failed, webhook); err != nil {
		t.Fatal(err)
	}
	if _, err := d.app.Pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id, topic, status, gen, created_at)
		SELECT gen_random_uuid(), w.id, w.account_id, gen_random_uuid(), 'order.created', 'success', w.gen,
			now() - interval '1 hour' + i * interval '1 millisecond'
		FROM webhooks w, generate_series(1, $2) AS i WHERE w.id = $1`, webhook, deliveryrm.FilterScan+5); err != nil {
		t.Fatal(err)
	}
	var pages []string
	path := "/v1/me/webhooks/" + webhook.String() + "/deliveries?status=failed"
	for cursor := ""; ; {
		var p struct {
			Data       []deliveryrm.Record `json:"data"`
			NextCursor *string             `json:"next_cursor"`
		}
		r := d.client.Get(path + cursor)
		if r.Status != 200 {
			t.Fatalf("GET %s: %d %s", path+cursor, r.Status, r.Body)
		}
		r.JSON(t, &p)
		var ids []string
		for _, rec := range p.Data {
			ids = append(ids, rec.ID.String())
		}
		pages = append(pages, "["+strings.Join(ids, " ")+"]")
		if p.NextCursor == nil || len(pages) > 3 {
			break
		}
		cursor = "&cursor=" + *p.NextCursor
	}
	if got, want := strings.Join(pages, " "), "[] ["+failed.String()+"]"; got != want {
		t.Errorf("the failed deliveries' pages are %s, want %s", got, want)
	}
}
