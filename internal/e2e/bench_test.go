package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/delivery"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkCreateOrder measures POST /v1/orders/pod end to end: HTTP,
// validation, the command log, the decider's transaction, the read model
// (the 201 waits for both), with every role running in-process.
//
//	go test -run '^$' -bench CreateOrder -benchtime 2000x ./internal/e2e/
func BenchmarkCreateOrder(b *testing.B) {
	d := startDemo(b, noPusher)
	v := d.variant(b, "ACTIVE", "tshirt")
	var n atomic.Int64
	run := func(c *testenv.Client) {
		raw, _ := json.Marshal(tshirtOrder(v.VariantID, fmt.Sprintf("bench-%d", n.Add(1)), 1))
		st, err := postJSON(c, "/v1/orders/pod", raw)
		if err != nil || st != 201 {
			b.Fatalf("create: %d %v", st, err)
		}
	}
	b.Run("sequential", func(b *testing.B) {
		c := testenv.NewClient(b, d.client.Base, d.cfg.DemoToken)
		for b.Loop() {
			run(c)
		}
	})
	b.Run("parallel16", func(b *testing.B) {
		b.SetParallelism(8) // 8 × GOMAXPROCS(2) = 16 clients
		b.RunParallel(func(pb *testing.PB) {
			c := testenv.NewClient(b, d.client.Base, d.cfg.DemoToken)
			for pb.Next() {
				run(c)
			}
		})
	})
}

// BenchmarkWebhookDelivery measures the sender: b.N delivery tasks for four
// webhooks of one client are put on pod.webhook.deliveries at once, and the
// clock runs until a local receiver has answered every one (deliveries/s),
// then until the delivery log shows them all succeeded (logged/s).
//
//	go test -run '^$' -bench WebhookDelivery -benchtime 20000x ./internal/e2e/
func BenchmarkWebhookDelivery(b *testing.B) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
	}))
	defer srv.Close()
	d := startDemo(b, func(c *config.Config) {
		c.Roles = []string{config.RoleAPI, config.RoleDecider, config.RoleProjector, config.RoleDelivery}
		c.WebhookAllowTargets = []string{strings.TrimPrefix(srv.URL, "http://")}
	})
	var hooks []uuid.UUID
	for i := range 4 {
		hooks = append(hooks, createWebhook(b, d.client, fmt.Sprintf("%s/%d", srv.URL, i)).ID)
	}
	payload := []byte(`{"id":"00000000-0000-0000-0000-000000000000","topic":"order.created","created_at":"2026-11-21T00:00:00Z","data":{"order":{"id":"x"},"tracking":null}}`)
	recs := make([]*kgo.Record, 0, b.N)
	now := time.Now().UTC()
	for i := range b.N {
		ev := uuid.New()
		wh := hooks[i%len(hooks)]
		rec, err := delivery.TaskRecord(d.topic(schemas.TopicWebhookDeliveries), demoTask(d, wh, ev, 1, payload, now))
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, rec)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < len(recs); i += 1000 {
		if err := d.app.Producer.ProduceSync(context.Background(), recs[i:min(i+1000, len(recs))]...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	testenv.Eventually(b, 5*time.Minute, func() error {
		if n := got.Load(); n < int64(b.N) {
			return fmt.Errorf("%d of %d deliveries received", n, b.N)
		}
		return nil
	})
	delivered := time.Since(start)
	testenv.Eventually(b, 5*time.Minute, func() error {
		var n int
		if err := d.app.Pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries WHERE status = 'success'`).Scan(&n); err != nil {
			return err
		}
		if n < b.N {
			return fmt.Errorf("%d of %d deliveries logged", n, b.N)
		}
		return nil
	})
	logged := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/delivered.Seconds(), "deliveries/s")
	b.ReportMetric(float64(b.N)/logged.Seconds(), "logged/s")
	if extra := got.Load() - int64(b.N); extra != 0 {
		b.Errorf("%d requests more than deliveries", extra)
	}
}
