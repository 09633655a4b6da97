package e2e

// The hostile suite: requests a hostile or careless client sends. Each gets
// a 4xx with a clear body, the service keeps serving, and an order created
// after all of them still goes the whole way (SUCCESS, with its webhook).

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/internal/testenv"
)

// hostileCase is one request and what it must be answered.
type hostileCase struct {
	name    string
	method  string
	path    string
	body    []byte
	header  map[string]string
	status  int
	code    string
	field   string // details.field, when the answer names one
	noToken bool
}

func (h hostileCase) send(t *testing.T, c *testenv.Client) testenv.Response {
	t.Helper()
	req, err := http.NewRequest(h.method, c.Base+h.path, bytes.NewReader(h.body))
	if err != nil {
		t.Fatal(err)
	}
	if !h.noToken {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if h.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range h.header {
		req.Header.Set(k, v)
	}
	return doRaw(t, req)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// with returns a copy of the order body with key set to v (a dotted path
// into nested objects; "line_items.0.x" indexes the first line).
func with(body map[string]any, path string, v any) map[string]any {
	var clone map[string]any
	raw, _ := json.Marshal(body)
	_ = json.Unmarshal(raw, &clone)
	var cur any = clone
	parts := strings.Split(path, ".")
	for i, p := range parts {
		last := i == len(parts)-1
		switch node := cur.(type) {
		case map[string]any:
			if last {
				node[p] = v
			} else {
				cur = node[p]
			}
		case []any:
			var idx int
			fmt.Sscan(p, &idx)
			if last {
				node[idx] = v
			} else {
				cur = node[idx]
			}
		}
	}
	return clone
}

func gzipped(t testing.TB, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rawHTTP writes request bytes to addr as they are and reads one response.
func rawHTTP(t *testing.T, addr, request string) (int, http.Header, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", request, err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header, body.String()
}

func TestHostileInputIsRefusedAndNeverStopsThePipeline(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc), fastPushes)
	c := d.client
	v := d.variant(t, "ACTIVE", "tshirt")
	hook := createWebhook(t, c, rc.url("/hooks"))
	rc.setSecret(hook.Secret)
	base := tshirtOrder(v.VariantID, "hostile-base", 1)
	order := func(path string, val any) []byte { return mustJSON(t, with(base, path, val)) }
	nested := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	bomb := gzipped(t, bytes.Repeat([]byte(" "), 64<<20)) // 64 MiB of spaces in ~64 KiB
	hookPath := "/v1/me/webhooks/" + hook.ID.String()

	cases := []hostileCase{
		{name: "a NUL in reference_id", method: "POST", path: "/v1/orders/pod", body: order("reference_id", "a\x00b"), status: 400, code: "VALIDATION_ERROR", field: "reference_id"},
		{name: "a NUL in note", method: "POST", path: "/v1/orders/pod", body: order("note", "hi\x00"), status: 400, code: "VALIDATION_ERROR", field: "note"},
		{name: "a NUL in a nested field", method: "POST", path: "/v1/orders/pod", body: order("line_items.0.sides", map[string]any{"front_side": "https://x.example/\x00.png"}), status: 400, code: "VALIDATION_ERROR", field: "line_items[0].sides.front_side"},
		{name: "a NUL in a key", method: "POST", path: "/v1/orders/pod", body: order("customer.ab\x00", "x"), status: 400, code: "VALIDATION_ERROR", field: "customer.ab\x00"},
		{name: "a NUL in a batch's own key", method: "POST", path: "/v1/orders/pod/batches", body: mustJSON(t, map[string]any{"orders": []any{base}, "x\x00": 1}), status: 400, code: "VALIDATION_ERROR", field: "x\x00"},
		{name: "a NUL in a webhook description", method: "POST", path: "/v1/me/webhooks", body: mustJSON(t, map[string]any{"url": rc.url("/x"), "topics": []string{"order.created"}, "description": "d\x00"}), status: 400, code: "VALIDATION_ERROR", field: "description"},
		{name: "a NUL in a webhook description patch", method: "PATCH", path: hookPath, body: []byte(`{"description":"\u0000"}`), status: 400, code: "VALIDATION_ERROR", field: "description"},
		{name: "a lone surrogate escape in reference_id", method: "POST", path: "/v1/orders/pod", body: bytes.Replace(order("reference_id", "R-X"), []byte("R-X"), []byte(`R-\ud800`), 1), status: 400, code: "VALIDATION_ERROR", field: "reference_id"},
		{name: "a lone surrogate escape in a webhook description patch", method: "PATCH", path: hookPath, body: []byte(`{"description":"d\udfff"}`), status: 400, code: "VALIDATION_ERROR", field: "description"},
		{name: "invalid UTF-8 in note", method: "POST", path: "/v1/orders/pod", body: []byte(strings.Replace(string(order("note", "XX")), "XX", "\xff\xfe", 1)), status: 400, code: "VALIDATION_ERROR", field: "note"},
		{name: "a key given twice", method: "POST", path: "/v1/orders/pod", body: []byte(`{"note":"a","note":"b"}`), status: 400, code: "VALIDATION_ERROR", field: "note"},
		{name: "JSON nested 100 deep", method: "POST", path: "/v1/orders/pod", body: []byte(`{"note":` + nested + `}`), status: 400, code: "VALIDATION_ERROR"},
		{name: "a number out of range", method: "POST", path: "/v1/orders/pod", body: []byte(strings.Replace(string(order("line_items.0.quantity", 7)), ":7", ":1e999", 1)), status: 400, code: "VALIDATION_ERROR", field: "line_items[0].quantity"},
		{name: "a quantity too big for an int", method: "POST", path: "/v1/orders/pod", body: []byte(strings.Replace(string(order("line_items.0.quantity", 7)), ":7", ":99999999999999999999", 1)), status: 400, code: "VALIDATION_ERROR"},
		{name: "two JSON values", method: "POST", path: "/v1/orders/pod", body: []byte(`{} {}`), status: 400, code: "VALIDATION_ERROR"},
		{name: "not JSON", method: "POST", path: "/v1/orders/pod", body: []byte(`<xml/>`), status: 400, code: "VALIDATION_ERROR"},
		{name: "a gzip bomb", method: "POST", path: "/v1/orders/pod", body: bomb, header: map[string]string{"Content-Encoding": "gzip"}, status: 413, code: "PAYLOAD_TOO_LARGE"},
		{name: "a gzip bomb to batches", method: "POST", path: "/v1/orders/pod/batches", body: bomb, header: map[string]string{"Content-Encoding": "gzip"}, status: 413, code: "PAYLOAD_TOO_LARGE"},
		{name: "a gzip bomb to webhooks", method: "POST", path: "/v1/me/webhooks", body: bomb, header: map[string]string{"Content-Encoding": "gzip"}, status: 413, code: "PAYLOAD_TOO_LARGE"},
		{name: "a body that is not gzip", method: "POST", path: "/v1/orders/pod", body: []byte("{}"), header: map[string]string{"Content-Encoding": "gzip"}, status: 400, code: "VALIDATION_ERROR", field: "Content-Encoding"},
		{name: "an unknown Content-Encoding", method: "POST", path: "/v1/orders/pod", body: []byte("{}"), header: map[string]string{"Content-Encoding": "zstd"}, status: 400, code: "VALIDATION_ERROR", field: "Content-Encoding"},
		{name: "a whitespace Idempotency-Key", method: "POST", path: "/v1/orders/pod", body: order("reference_id", "idem-ws"), header: map[string]string{"Idempotency-Key": "\t\t"}, status: 400, code: "VALIDATION_ERROR", field: "Idempotency-Key"},
		{name: "a non-ASCII Idempotency-Key", method: "POST", path: "/v1/orders/pod", body: order("reference_id", "idem-na"), header: map[string]string{"Idempotency-Key": "clé"}, status: 400, code: "VALIDATION_ERROR", field: "Idempotency-Key"},
		{name: "an Idempotency-Key of 256 characters", method: "POST", path: "/v1/orders/pod", body: order("reference_id", "idem-long"), header: map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, status: 400, code: "VALIDATION_ERROR", field: "Idempotency-Key"},
		{name: "is_active null", method: "PATCH", path: hookPath, body: []byte(`{"is_active":null}`), status: 400, code: "VALIDATION_ERROR", field: "is_active"},
		{name: "url null", method: "PATCH", path: hookPath, body: []byte(`{"url":null}`), status: 400, code: "VALIDATION_ERROR", field: "url"},
		{name: "topics null", method: "PATCH", path: hookPath, body: []byte(`{"topics":null}`), status: 400, code: "VALIDATION_ERROR", field: "topics"},
		{name: "a NUL in a query value", method: "GET", path: "/v1/stores/" + d.store(t, "ACTIVE").StoreID.String() + "/products?q=%00", status: 400, code: "VALIDATION_ERROR", field: "q"},
		{name: "invalid UTF-8 in a query value", method: "GET", path: "/v1/stores/" + d.store(t, "ACTIVE").StoreID.String() + "/products?q=%FF", status: 400, code: "VALIDATION_ERROR", field: "q"},
		{name: "a NUL in a query name", method: "GET", path: "/v1/orders/pod?a%00=1", status: 400, code: "VALIDATION_ERROR", field: "query"},
		{name: "a status filter given twice", method: "GET", path: "/v1/orders/pod?status=FAILED&status=CANCELLED", status: 400, code: "VALIDATION_ERROR", field: "status"},
		{name: "a limit given twice", method: "GET", path: "/v1/stores?limit=5&limit=100", status: 400, code: "VALIDATION_ERROR", field: "limit"},
		{name: "a control character in reference_id", method: "POST", path: "/v1/orders/pod", body: order("reference_id", "ref\x07"), status: 400, code: "VALIDATION_ERROR", field: "reference_id"},
		{name: "a bidi override in reference_id", method: "POST", path: "/v1/orders/pod", body: order("reference_id", "ref\u202egnp"), status: 400, code: "VALIDATION_ERROR", field: "reference_id"},
		{name: "a zero-width space in reference_id", method: "POST", path: "/v1/orders/pod", body: order("reference_id", "ref\u200b1"), status: 400, code: "VALIDATION_ERROR", field: "reference_id"},
		{name: "a side URL with a space", method: "POST", path: "/v1/orders/pod", body: order("line_items.0.sides", map[string]any{"front_side": "https://img.example.com/a b.png"}), status: 400, code: "VALIDATION_ERROR", field: "line_items[0].sides.front_side"},
		{name: "a side URL with angle brackets", method: "POST", path: "/v1/orders/pod", body: order("line_items.0.sides", map[string]any{"front_side": "https://img.example.com/<x>.png"}), status: 400, code: "VALIDATION_ERROR", field: "line_items[0].sides.front_side"},
		{name: "a webhook URL with a space", method: "POST", path: "/v1/me/webhooks", body: mustJSON(t, map[string]any{"url": "https://hooks.example.com/a b", "topics": []string{"order.created"}}), status: 400, code: "INVALID_WEBHOOK_URL", field: "url"},
		{name: "a webhook on an IPv6 documentation range", method: "POST", path: "/v1/me/webhooks", body: mustJSON(t, map[string]any{"url": "https://[3fff::1]/h", "topics": []string{"order.created"}}), status: 400, code: "INVALID_WEBHOOK_URL", field: "url"},
		{name: "GET on the batches intake", method: "GET", path: "/v1/orders/pod/batches", status: 405, code: "METHOD_NOT_ALLOWED"},
		{name: "PATCH on the webhook topics list", method: "PATCH", path: "/v1/me/webhooks/topics", body: []byte(`{}`), status: 405, code: "METHOD_NOT_ALLOWED"},
		{name: "a malformed order id", method: "GET", path: "/v1/orders/pod/not-a-uuid", status: 400, code: "VALIDATION_ERROR", field: "order_id"},
		{name: "a malformed webhook id", method: "GET", path: "/v1/me/webhooks/not-a-uuid", status: 400, code: "VALIDATION_ERROR", field: "id"},
		{name: "a malformed delivery id", method: "GET", path: hookPath + "/deliveries/not-a-uuid", status: 400, code: "VALIDATION_ERROR", field: "delivery_id"},
		{name: "a malformed delivery id under an unknown webhook", method: "GET", path: "/v1/me/webhooks/" + uuid.NewString() + "/deliveries/not-a-uuid", status: 400, code: "VALIDATION_ERROR", field: "delivery_id"},
		{name: "a resend of a malformed delivery id under an unknown webhook", method: "POST", path: "/v1/me/webhooks/" + uuid.NewString() + "/deliveries/not-a-uuid/resend", status: 400, code: "VALIDATION_ERROR", field: "delivery_id"},
		{name: "a malformed webhook id before a malformed delivery id", method: "GET", path: "/v1/me/webhooks/not-a-uuid/deliveries/nor-this", status: 400, code: "VALIDATION_ERROR", field: "id"},
		{name: "a token that is not ASCII", method: "GET", path: "/v1/stores", header: map[string]string{"Authorization": "Bearer tok\xe9n"}, noToken: true, status: 401, code: "UNAUTHORIZED"},
	}
	for _, h := range cases {
		t.Run(h.name, func(t *testing.T) {
			r := h.send(t, c)
			if r.Status != h.status {
				t.Fatalf("status %d, want %d: %s", r.Status, h.status, r.Body)
			}
			e := r.Err(t)
			if e.Error != h.code {
				t.Fatalf("error %s, want %s: %s", e.Error, h.code, r.Body)
			}
			if h.field != "" && e.Details["field"] != h.field {
				t.Fatalf("details.field %q, want %q: %s", e.Details["field"], h.field, r.Body)
			}
			if h.status == 405 && r.Header.Get("Allow") == "" {
				t.Fatalf("405 without Allow")
			}
			if s := c.Get("/v1/stores"); s.Status != 200 {
				t.Fatalf("service stopped serving after it: %d %s", s.Status, s.Body)
			}
		})
	}

	t.Run("a NUL in a batch order's note fails that order alone", func(t *testing.T) {
		r := c.Do("POST", "/v1/orders/pod/batches", map[string]any{"orders": []any{with(with(base, "note", "\x00"), "reference_id", "hostile-batch")}})
		if r.Status != 202 {
			t.Fatalf("batch: %d %s", r.Status, r.Body)
		}
		var st batchStatus
		r.JSON(t, &st)
		testenv.Eventually(t, 30*time.Second, func() error {
			c.Get("/v1/orders/pod/batches/"+st.BatchID.String()).JSON(t, &st)
			if st.Status != "completed" {
				return fmt.Errorf("batch %s", st.Status)
			}
			return nil
		})
		if it := st.Items[0]; it.Status != "failed" || *it.HTTPStatus != 400 || !strings.Contains(string(it.Error), `"field":"note"`) {
			t.Fatalf("the order: %s %v %s", it.Status, *it.HTTPStatus, it.Error)
		}
	})

	t.Run("the webhook is still active after the null patch", func(t *testing.T) {
		if w := getWebhook(t, c, hook.ID); !w.IsActive {
			t.Fatal("webhook was disabled by a refused patch")
		}
	})

	t.Run("references equal in NFC are one reference", func(t *testing.T) {
		nfc, nfd := "café-1", "cafe\u0301-1"
		if r := c.Do("POST", "/v1/orders/pod", with(base, "reference_id", nfc)); r.Status != 201 {
			t.Fatalf("NFC create: %d %s", r.Status, r.Body)
		}
		r := c.Do("POST", "/v1/orders/pod", with(with(base, "reference_id", nfd), "force", true))
		if r.Status != 409 || r.Err(t).Error != "DUPLICATE_REFERENCE_ID" {
			t.Fatalf("NFD create of the same reference: %d %s", r.Status, r.Body)
		}
	})

	t.Run("malformed framing is refused without echoing the request", func(t *testing.T) {
		addr := d.app.Addr()
		secret := "Bearer " + d.cfg.DemoToken
		for _, raw := range []struct{ name, req string }{
			{"a header line without a colon", "GET /v1/stores HTTP/1.1\r\nHost: x\r\nAuthorization: " + secret + "\r\nthis line has no colon\r\nX-After: 1\r\n\r\n"},
			{"two Authorization headers", "GET /v1/stores HTTP/1.1\r\nHost: x\r\nAuthorization: " + secret + "\r\nAuthorization: Bearer other\r\n\r\n"},
			{"conflicting Content-Length", "POST /v1/orders/pod HTTP/1.1\r\nHost: x\r\nAuthorization: " + secret + "\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\n{}xyz"},
			{"Content-Length beside chunked", "POST /v1/orders/pod HTTP/1.1\r\nHost: x\r\nAuthorization: " + secret + "\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"},
			{"an HTTP/1.1 request without Host", "GET /v1/stores HTTP/1.1\r\nAuthorization: " + secret + "\r\n\r\n"},
			// fasthttp's message quotes the header; it once read as a
			// timeout, and the connection was closed without an answer.
			{"a malformed request with a header saying timeout", "GET /v1/stores HTTP/1.1\r\nAuthorization: " + secret + "\r\nKeep-Alive: timeout=5\r\n\r\n"},
		} {
			status, _, body := rawHTTP(t, addr, raw.req)
			if status != 400 || !strings.Contains(body, `"VALIDATION_ERROR"`) || strings.Contains(body, "timeout") {
				t.Errorf("%s: status %d, want 400 VALIDATION_ERROR, not a timeout: %s", raw.name, status, body)
			}
			if strings.Contains(body, d.cfg.DemoToken) || strings.Contains(body, "Authorization") && strings.Contains(body, "Bearer") {
				t.Errorf("%s: the answer echoes the request: %s", raw.name, body)
			}
		}
		// The body is checked as the first Content-Encoding says; Fiber's
		// c.Body() would decode it as the last, past every check.
		status, _, body := rawHTTP(t, addr, "POST /v1/orders/pod HTTP/1.1\r\nHost: x\r\nAuthorization: "+secret+
			"\r\nContent-Encoding: identity\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\n{}")
		if status != 400 || !strings.Contains(body, "send one Content-Encoding header") {
			t.Errorf("two Content-Encoding headers: status %d, want 400 naming them: %s", status, body)
		}
	})

	t.Run("bad tokens are rate limited per address", func(t *testing.T) {
		bad := testenv.NewClient(t, c.Base, "not-a-token-"+uuid.NewString())
		// The test configuration allows a burst of 500 failures; well
		// before 2000 the address must be refused.
		var limited testenv.Response
		for i := 0; i < 2000 && limited.Status == 0; i++ {
			switch r := bad.Get("/v1/stores"); r.Status {
			case 429:
				limited = r
			case 401:
			default:
				t.Fatalf("bad token: %d %s", r.Status, r.Body)
			}
		}
		if limited.Status != 429 {
			t.Fatal("2000 bad tokens from one address were never refused with 429")
		}
		if limited.Header.Get("Retry-After") == "" {
			t.Fatalf("429 without Retry-After: %s", limited.Body)
		}
		if r := c.Get("/v1/stores"); r.Status != 200 {
			t.Fatalf("a good token from the same address: %d", r.Status)
		}
	})

	t.Run("an order created after all of it reaches SUCCESS with its webhook", func(t *testing.T) {
		canary(t, d, rc, v.VariantID)
	})
}

// canary creates an order and waits until it is SUCCESS and its webhook
// (order.status_updated to SUCCESS) reached rc. The demo account must have
// an active webhook on rc.
func canary(t testing.TB, d demoEnv, rc *receiver, variant uuid.UUID) {
	t.Helper()
	r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(variant, "canary-"+uuid.NewString()[:8], 1))
	if r.Status != 201 {
		t.Fatalf("canary create: %d %s", r.Status, r.Body)
	}
	var o struct {
		OrderID uuid.UUID `json:"order_id"`
	}
	r.JSON(t, &o)
	d.waitStatus(t, d.client, o.OrderID, "SUCCESS")
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, got := range rc.requests() {
			if got.SigOK && bytes.Contains(got.Body, []byte(o.OrderID.String())) && bytes.Contains(got.Body, []byte(`"SUCCESS"`)) {
				return nil
			}
		}
		return fmt.Errorf("no SUCCESS webhook for the canary order %s yet", o.OrderID)
	})
}
