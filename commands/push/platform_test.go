package push

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/sethvargo/go-retry"
)

const shop = "demo.myshop.example"

// fastBackoff allows the same three retries as the default, 1ms apart.
func fastBackoff() retry.Backoff {
	return retry.WithMaxRetries(3, retry.NewConstant(time.Millisecond))
}

func sampleOrder() Order {
	return Order{
		OrderID:         uuid.MustParse("20000000-0000-0000-0000-000000000001"),
		ReferenceID:     "R-1",
		Customer:        json.RawMessage(`{"name":"Ada"}`),
		ShippingService: "eco",
		LineItems:       json.RawMessage(`[{"sku":"TEE-M","quantity":2}]`),
		Tags:            "pod",
	}
}

// counted wraps h, counting the requests it receives.
func counted(h http.Handler) (http.Handler, *atomic.Int32) {
	var n atomic.Int32
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	}), &n
}

// serve starts an httptest server for h, closed when the test ends.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// hold keeps a handler busy until the client goes away or release closes.
// It reads the body first: only then does the server watch the connection
// and cancel the request's context when the client hangs up.
func hold(r *http.Request, release <-chan struct{}) {
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
	case <-release:
	}
}

// platformError asserts that err is an *Error and returns it.
func platformError(t *testing.T, err error) *Error {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v (%T), want *Error", err, err)
	}
	return pe
}

func TestCreateOrderSendsRequest(t *testing.T) {
	type seen struct {
		method, path string
		header       http.Header
		body         []byte
	}
	got := make(chan seen, 1)
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.EscapedPath(), r.Header.Clone(), body}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"gid://x/Order/9","number":"#9"}`)
	}))

	key := uuid.New()
	c := &Client{BaseURL: srv.URL + "/", Backoff: fastBackoff}
	res, err := c.CreateOrder(context.Background(), "a b/c.example", key, sampleOrder())
	if err != nil {
		t.Fatal(err)
	}
	if want := (Result{PlatformOrderID: "gid://x/Order/9", PlatformOrderNumber: "#9"}); res != want {
		t.Errorf("result = %+v, want %+v", res, want)
	}

	s := <-got
	if s.method != http.MethodPost {
		t.Errorf("method = %s", s.method)
	}
	if want := "/shops/a%20b%2Fc.example/orders"; s.path != want {
		t.Errorf("path = %s, want %s", s.path, want)
	}
	for name, want := range map[string]string{
		"Content-Type":    "application/json",
		"Idempotency-Key": key.String(),
		"User-Agent":      "pod-pusher/1",
	} {
		if v := s.header.Get(name); v != want {
			t.Errorf("%s = %q, want %q", name, v, want)
		}
	}
	var sent map[string]any
	if err := json.Unmarshal(s.body, &sent); err != nil {
		t.Fatalf("body %s: %v", s.body, err)
	}
	if sent["order_id"] != sampleOrder().OrderID.String() || sent["reference_id"] != "R-1" || sent["shipping_service"] != "eco" {
		t.Errorf("body = %s", s.body)
	}
	for _, omitted := range []string{"shipping_address", "label_link", "tracking_number", "note"} {
		if _, ok := sent[omitted]; ok {
			t.Errorf("empty %s was sent: %s", omitted, s.body)
		}
	}
}

func TestCreateOrderIdempotentReplay(t *testing.T) {
	sim := NewSimulator(nil)
	h, requests := counted(sim)
	c := &Client{BaseURL: serve(t, h).URL, Backoff: fastBackoff}
	ctx := context.Background()

	key := uuid.New()
	first, err := c.CreateOrder(ctx, shop, key, sampleOrder())
	if err != nil {
		t.Fatal(err)
	}
	if want := (Result{PlatformOrderID: "gid://simulator/Order/1", PlatformOrderNumber: "#1001"}); first != want {
		t.Fatalf("first = %+v, want %+v", first, want)
	}
	again, err := c.CreateOrder(ctx, shop, key, sampleOrder())
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Errorf("replay = %+v, want %+v", again, first)
	}
	if n := sim.Orders(shop); n != 1 {
		t.Errorf("orders after replay = %d, want 1", n)
	}

	other, err := c.CreateOrder(ctx, shop, uuid.New(), sampleOrder())
	if err != nil {
		t.Fatal(err)
	}
	if other.PlatformOrderNumber != "#1002" {
		t.Errorf("new key gave %+v, want number #1002", other)
	}
	if n := sim.Orders(shop); n != 2 {
		t.Errorf("orders = %d, want 2", n)
	}
	if n := requests.Load(); n != 3 {
		t.Errorf("requests = %d, want 3", n)
	}
}

// TestCreateOrderSimulated runs the client against the simulator in its
// failure modes.
func TestCreateOrderSimulated(t *testing.T) {
	noItems := sampleOrder()
	noItems.LineItems = nil

	tests := []struct {
		name       string
		authorized func(context.Context, string) (bool, error)
		failNext   int
		order      Order
		wantStatus int // 0: success expected
		permanent  bool
		requests   int32
		orders     int
	}{
		{name: "ok", order: sampleOrder(), requests: 1, orders: 1},
		{
			name:       "credential error is permanent and not retried",
			authorized: func(_ context.Context, d string) (bool, error) { return d != shop, nil },
			order:      sampleOrder(), wantStatus: 401, permanent: true, requests: 1,
		},
		{
			name:     "two 503s then success",
			failNext: 2, order: sampleOrder(), requests: 3, orders: 1,
		},
		{
			name:     "503 outlasting the retries",
			failNext: 100, order: sampleOrder(), wantStatus: 503, requests: 4,
		},
		{
			name:       "authorization lookup failure is transient",
			authorized: func(context.Context, string) (bool, error) { return false, errors.New("db down") },
			order:      sampleOrder(), wantStatus: 503, requests: 4,
		},
		{
			name:  "invalid order is permanent",
			order: noItems, wantStatus: 422, permanent: true, requests: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := NewSimulator(tt.authorized)
			sim.FailNext(tt.failNext)
			h, requests := counted(sim)
			c := &Client{BaseURL: serve(t, h).URL, Backoff: fastBackoff}

			res, err := c.CreateOrder(context.Background(), shop, uuid.New(), tt.order)
			if tt.wantStatus == 0 {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if res.PlatformOrderID == "" || res.PlatformOrderNumber == "" {
					t.Errorf("result = %+v", res)
				}
			} else {
				pe := platformError(t, err)
				if pe.Status != tt.wantStatus || pe.Permanent != tt.permanent {
					t.Errorf("err = %+v, want status %d permanent %v", pe, tt.wantStatus, tt.permanent)
				}
				if IsPermanent(err) != tt.permanent {
					t.Errorf("IsPermanent = %v", !tt.permanent)
				}
			}
			if n := requests.Load(); n != tt.requests {
				t.Errorf("requests = %d, want %d", n, tt.requests)
			}
			if n := sim.Orders(shop); n != tt.orders {
				t.Errorf("orders = %d, want %d", n, tt.orders)
			}
		})
	}
}

func TestCreateOrderStatuses(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		permanent bool
		requests  int32
		code, msg string
	}{
		{"401 with body", 401, `{"error":"invalid_credentials","message":"the shop's access credentials were rejected"}`, true, 1, "invalid_credentials", "the shop's access credentials were rejected"},
		{"400 without body", 400, ``, true, 1, "", "Bad Request"},
		{"403 with other JSON", 403, `{"detail":"nope"}`, true, 1, "", "Forbidden"},
		{"404 plain text", 404, `not here`, true, 1, "", "Not Found"},
		{"409 code only", 409, `{"error":"conflict"}`, true, 1, "conflict", "conflict"},
		{"422", 422, `{"error":"invalid_order","message":"line_items must be a non-empty array"}`, true, 1, "invalid_order", "line_items must be a non-empty array"},
		{"202 without an order", 202, `{}`, true, 1, "", "Accepted"},
		{"unknown status", 499, ``, true, 1, "", "unexpected status"},
		{"408", 408, ``, false, 4, "", "Request Timeout"},
		{"429", 429, `{"error":"throttled","message":"slow down"}`, false, 4, "throttled", "slow down"},
		{"500", 500, ``, false, 4, "", "Internal Server Error"},
		{"502 html", 502, `<html>bad gateway</html>`, false, 4, "", "Bad Gateway"},
		{"503 with body", 503, `{"error":"unavailable","message":"maintenance"}`, false, 4, "unavailable", "maintenance"},
		{"201 unreadable", 201, `not json`, false, 4, "", "unreadable success response"},
		{"200 without id", 200, `{"number":"#1"}`, false, 4, "", "unreadable success response"},
		{"201 over the size limit", 201, `{"id":"` + strings.Repeat("x", maxBodyBytes) + `"}`, false, 4, "", "unreadable success response"},
		{"201 with a NUL in its id", 201, `{"id":"ord\u0000123"}`, false, 4, "", "unreadable success response"},
		{"201 with an escape in its number", 201, `{"id":"ord-1","number":"#\u001b[1m1"}`, false, 4, "", "unreadable success response"},
		{"201 with an id over 255 bytes", 201, `{"id":"` + strings.Repeat("x", 256) + `"}`, false, 4, "", "unreadable success response"},
		{"422 with a NUL and a line break in its code and message", 422, `{"error":"bad\u0000code","message":"line\u0000one\nline two"}`,
			true, 1, "bad code", "line one line two"},
		{"400 with a message over 500 bytes, cut at a character", 400, `{"message":"` + strings.Repeat("é", 300) + `"}`,
			true, 1, "", strings.Repeat("é", 250)},
		{"400 with a code over 255 bytes", 400, `{"error":"` + strings.Repeat("c", 300) + `"}`,
			true, 1, strings.Repeat("c", 255), strings.Repeat("c", 255)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, requests := counted(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			c := &Client{BaseURL: serve(t, h).URL, Backoff: fastBackoff}

			_, err := c.CreateOrder(context.Background(), shop, uuid.New(), sampleOrder())
			pe := platformError(t, err)
			want := Error{Status: tt.status, Code: tt.code, Message: tt.msg, Permanent: tt.permanent}
			if *pe != want {
				t.Errorf("err = %+v, want %+v", *pe, want)
			}
			if n := requests.Load(); n != tt.requests {
				t.Errorf("requests = %d, want %d", n, tt.requests)
			}
		})
	}
}

func TestCreateOrderDoesNotFollowRedirects(t *testing.T) {
	target, followed := counted(NewSimulator(nil))
	for _, status := range []int{301, 302, 307, 308} {
		for _, custom := range []bool{false, true} {
			h, requests := counted(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/elsewhere"+r.URL.Path, status)
			}))
			mux := http.NewServeMux()
			mux.Handle("/shops/", h)
			mux.Handle("/elsewhere/", http.StripPrefix("/elsewhere", target))
			c := &Client{BaseURL: serve(t, mux).URL, Backoff: fastBackoff}
			var own *http.Client
			if custom {
				// A caller's client that follows redirects keeps doing so
				// elsewhere, but not for CreateOrder.
				own = &http.Client{}
				c.HTTP = own
			}

			_, err := c.CreateOrder(context.Background(), shop, uuid.New(), sampleOrder())
			pe := platformError(t, err)
			if pe.Status != status || !pe.Permanent {
				t.Errorf("%d (custom client %v): err = %+v, want permanent %d", status, custom, pe, status)
			}
			if n := requests.Load(); n != 1 {
				t.Errorf("%d: requests = %d, want 1", status, n)
			}
			if own != nil && own.CheckRedirect != nil {
				t.Errorf("caller's client was modified")
			}
		}
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("redirect target got %d requests", n)
	}
}

func TestCreateOrderTimeoutIsTransient(t *testing.T) {
	tests := []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request, release <-chan struct{})
	}{
		{"no response", func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			hold(r, release)
		}},
		{"body stalls", func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":`)
			w.(http.Flusher).Flush()
			hold(r, release)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			h, requests := counted(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tt.handler(w, r, release)
			}))
			srv := serve(t, h)
			// Registered after serve, so it runs before srv.Close waits
			// for the handlers.
			t.Cleanup(func() { close(release) })
			c := &Client{BaseURL: srv.URL, Timeout: 30 * time.Millisecond, Backoff: fastBackoff}

			_, err := c.CreateOrder(context.Background(), shop, uuid.New(), sampleOrder())
			pe := platformError(t, err)
			if pe.Permanent || pe.Status != 0 || !strings.Contains(pe.Message, "timed out") {
				t.Errorf("err = %+v, want a transient timeout", pe)
			}
			if n := requests.Load(); n != 4 {
				t.Errorf("requests = %d, want 4", n)
			}
		})
	}
}

func TestCreateOrderConnectionErrors(t *testing.T) {
	t.Run("connection dropped", func(t *testing.T) {
		h, requests := counted(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}))
		c := &Client{BaseURL: serve(t, h).URL, Backoff: fastBackoff}
		_, err := c.CreateOrder(context.Background(), shop, uuid.New(), sampleOrder())
		pe := platformError(t, err)
		if pe.Permanent || pe.Status != 0 || !strings.Contains(pe.Message, "connection error") {
			t.Errorf("err = %+v, want a transient connection error", pe)
		}
		// net/http may itself resend a request carrying an Idempotency-Key,
		// so there can be more than our four attempts.
		if n := requests.Load(); n < 4 {
			t.Errorf("requests = %d, want at least 4", n)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		c := &Client{BaseURL: srv.URL, Backoff: fastBackoff}
		_, err := c.CreateOrder(context.Background(), shop, uuid.New(), sampleOrder())
		pe := platformError(t, err)
		if pe.Permanent || pe.Status != 0 {
			t.Errorf("err = %+v, want transient with status 0", pe)
		}
	})
}

func TestCreateOrderContextEnds(t *testing.T) {
	// A backoff this slow would hang the test if cancellation were ignored.
	slow := func() retry.Backoff { return retry.WithMaxRetries(3, retry.NewConstant(time.Hour)) }

	t.Run("already canceled", func(t *testing.T) {
		h, requests := counted(NewSimulator(nil))
		c := &Client{BaseURL: serve(t, h).URL, Backoff: slow}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := c.CreateOrder(ctx, shop, uuid.New(), sampleOrder())
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if n := requests.Load(); n != 0 {
			t.Errorf("requests = %d, want 0", n)
		}
	})

	t.Run("canceled while waiting to retry", func(t *testing.T) {
		sim := NewSimulator(nil)
		sim.FailNext(100)
		h, requests := counted(sim)
		c := &Client{BaseURL: serve(t, h).URL, Backoff: slow}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(50*time.Millisecond, cancel)

		start := time.Now()
		_, err := c.CreateOrder(ctx, shop, uuid.New(), sampleOrder())
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("returned after %s", d)
		}
		if n := requests.Load(); n != 1 {
			t.Errorf("requests = %d, want 1", n)
		}
	})

	t.Run("canceled during a request", func(t *testing.T) {
		arrived := make(chan struct{}, 1)
		release := make(chan struct{})
		h, requests := counted(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			hold(r, release)
		}))
		c := &Client{BaseURL: serve(t, h).URL, Backoff: slow}
		t.Cleanup(func() { close(release) })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-arrived
			cancel()
		}()

		_, err := c.CreateOrder(ctx, shop, uuid.New(), sampleOrder())
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if n := requests.Load(); n != 1 {
			t.Errorf("requests = %d, want 1", n)
		}
	})

	t.Run("caller's deadline is not a platform timeout", func(t *testing.T) {
		release := make(chan struct{})
		srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hold(r, release)
		}))
		t.Cleanup(func() { close(release) })
		c := &Client{BaseURL: srv.URL, Backoff: slow}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()

		_, err := c.CreateOrder(ctx, shop, uuid.New(), sampleOrder())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want context.DeadlineExceeded", err)
		}
		var pe *Error
		if errors.As(err, &pe) {
			t.Errorf("err = %v, want the context's error, not *Error", err)
		}
	})
}

func TestCreateOrderRejectsBadInput(t *testing.T) {
	h, requests := counted(NewSimulator(nil))
	c := &Client{BaseURL: serve(t, h).URL, Backoff: fastBackoff}
	for name, call := range map[string]func() error{
		"empty shop domain": func() error {
			_, err := c.CreateOrder(context.Background(), "", uuid.New(), sampleOrder())
			return err
		},
		"nil idempotency key": func() error {
			_, err := c.CreateOrder(context.Background(), shop, uuid.Nil, sampleOrder())
			return err
		},
		"invalid raw JSON": func() error {
			o := sampleOrder()
			o.Customer = json.RawMessage(`{`)
			_, err := c.CreateOrder(context.Background(), shop, uuid.New(), o)
			return err
		},
	} {
		if pe := platformError(t, call()); !pe.Permanent {
			t.Errorf("%s: err = %+v, want permanent", name, pe)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("requests = %d, want 0", n)
	}
}

func TestDefaultBackoff(t *testing.T) {
	b := defaultBackoff()
	for _, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond} {
		if d, stop := b.Next(); stop || d != want {
			t.Fatalf("Next = %s, %v; want %s", d, stop, want)
		}
	}
	if _, stop := b.Next(); !stop {
		t.Fatal("a fourth retry was allowed")
	}
}

func TestErrorString(t *testing.T) {
	for _, tt := range []struct {
		err  Error
		want string
	}{
		{Error{Status: 401, Message: "rejected", Permanent: true}, "store platform: permanent error: status 401: rejected"},
		{Error{Message: "request timed out after 10s"}, "store platform: transient error: request timed out after 10s"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}
