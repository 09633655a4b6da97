package e2e

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/testenv"
)

// FuzzAPI sends fuzzed bodies and query strings to every endpoint of a
// running podsvc, as the demo account, on ids that exist (an order, a
// webhook, a delivery, a batch, a store, a product), so handlers run past
// their path checks. The property: every answer is 2xx, 4xx or a 503, never
// another 5xx; and when the run ends, an order created after it still
// reaches SUCCESS with its webhook (no input stopped a stage).
func FuzzAPI(f *testing.F) {
	rc := newReceiver(f)
	d := startDemo(f, allow(rc), fastPushes)
	c := d.client
	v := d.variant(f, "ACTIVE", "tshirt")
	st := d.store(f, "ACTIVE")
	product := firstProduct(f, d, st.StoreID)
	orderBody := mustJSON(f, tshirtOrder(v.VariantID, "fuzz-seed", 1))
	r := c.Do("POST", "/v1/orders/pod", orderBody)
	if r.Status != 201 {
		f.Fatalf("seed order: %d %s", r.Status, r.Body)
	}
	var o struct {
		OrderID uuid.UUID `json:"order_id"`
	}
	r.JSON(f, &o)
	hook := createWebhook(f, c, rc.url("/fuzz"))
	batch := c.Do("POST", "/v1/orders/pod/batches", map[string]any{"orders": []any{tshirtOrder(v.VariantID, "fuzz-batch", 1)}})
	var b struct {
		BatchID uuid.UUID `json:"batch_id"`
	}
	batch.JSON(f, &b)
	delivery := uuid.NewString()

	endpoints := []struct{ method, path string }{
		{"POST", "/v1/orders/pod"},
		{"POST", "/v1/orders/pod/batches"},
		{"GET", "/v1/orders/pod/batches/" + b.BatchID.String()},
		{"GET", "/v1/orders/pod"},
		{"GET", "/v1/orders/pod/" + o.OrderID.String()},
		{"GET", "/v1/orders/pod/" + o.OrderID.String() + "/queue"},
		{"POST", "/v1/orders/pod/" + o.OrderID.String() + "/retry"},
		{"POST", "/v1/orders/pod/" + o.OrderID.String() + "/cancel"},
		{"GET", "/v1/stores"},
		{"GET", "/v1/stores/" + st.StoreID.String() + "/products"},
		{"GET", "/v1/stores/" + st.StoreID.String() + "/products/" + product},
		{"GET", "/v1/config/shipping-rates"},
		{"GET", "/v1/config/pricing-sides"},
		{"GET", "/v1/config/yarn-types"},
		{"GET", "/v1/config/country-codes"},
		{"GET", "/v1/me/webhooks/topics"},
		{"GET", "/v1/me/webhooks"},
		{"POST", "/v1/me/webhooks"},
		{"GET", "/v1/me/webhooks/" + hook.ID.String()},
		{"PATCH", "/v1/me/webhooks/" + hook.ID.String()},
		{"POST", "/v1/me/webhooks/" + hook.ID.String() + "/rotate-secret"},
		{"POST", "/v1/me/webhooks/" + hook.ID.String() + "/test"},
		{"GET", "/v1/me/webhooks/" + hook.ID.String() + "/deliveries"},
		{"GET", "/v1/me/webhooks/" + hook.ID.String() + "/deliveries/" + delivery},
		{"POST", "/v1/me/webhooks/" + hook.ID.String() + "/deliveries/" + delivery + "/resend"},
		{"DELETE", "/v1/me/webhooks/" + uuid.NewString()},
	}
	for i, e := range endpoints {
		var seed []byte
		switch {
		case e.path == "/v1/orders/pod" && e.method == "POST":
			seed = orderBody
		case strings.HasSuffix(e.path, "/batches") && e.method == "POST":
			seed = mustJSON(f, map[string]any{"orders": []any{tshirtOrder(v.VariantID, "fuzz-b2", 1)}})
		case e.method == "POST" && e.path == "/v1/me/webhooks", e.method == "PATCH":
			seed = []byte(`{"url":"https://hooks.example.com/x","topics":["order.created"],"description":"d"}`)
		}
		f.Add(uint8(i), "limit=5&status=PENDING&q=tee", seed)
		f.Add(uint8(i), "cursor=eyJ9&from=2026-01-01T00:00:00Z", []byte(`{"note":"\u0000","a":{"a":1,"a":2}}`))
	}
	f.Add(uint8(0), "", []byte(strings.Replace(string(orderBody), `"fuzz-seed"`, `"\ud800\u0000"`, 1)))
	f.Add(uint8(9), "q=%00&search_type=sku", []byte(nil))
	// Cursors forged with a NUL as the text key of the position.
	f.Add(uint8(8), "cursor=eyJuIjoiXHUwMDAwIiwiaSI6IjAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMCJ9", []byte(nil))
	f.Add(uint8(9), "cursor=eyJ0IjoiXHUwMDAwIiwiaSI6IjAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMCJ9", []byte(nil))

	f.Cleanup(func() {
		// Whatever the inputs did to the demo account's webhooks, the
		// canary gets one of its own.
		for _, w := range listWebhooks(f, c) {
			c.Do("DELETE", "/v1/me/webhooks/"+w.ID.String(), nil)
		}
		w := createWebhook(f, c, rc.url("/canary"))
		rc.setSecret(w.Secret)
		canary(f, d, rc, v.VariantID)
	})

	f.Fuzz(func(t *testing.T, which uint8, query string, body []byte) {
		e := endpoints[int(which)%len(endpoints)]
		req, err := http.NewRequest(e.method, c.Base+e.path+"?"+query, bytes.NewReader(body))
		if err != nil {
			return // not a request a client can send
		}
		req.Header.Set("Authorization", "Bearer "+c.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", e.method, e.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s %s?%q with %q: %d", e.method, e.path, query, body, resp.StatusCode)
		}
	})
}

func firstProduct(t testing.TB, d demoEnv, store uuid.UUID) string {
	t.Helper()
	var page struct {
		Data []struct {
			ProductID uuid.UUID `json:"product_id"`
		}
	}
	d.client.Get("/v1/stores/"+store.String()+"/products?limit=1").JSON(t, &page)
	if len(page.Data) == 0 {
		t.Fatal("the demo store has no products")
	}
	return page.Data[0].ProductID.String()
}

func listWebhooks(t testing.TB, c *testenv.Client) []webhookJSON {
	t.Helper()
	var page struct{ Data []webhookJSON }
	c.Get("/v1/me/webhooks?limit=100").JSON(t, &page)
	return page.Data
}
