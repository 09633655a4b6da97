package push

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
)

const validBody = `{"order_id":"20000000-0000-0000-0000-000000000001","reference_id":"R-1","shipping_service":"eco","line_items":[{"sku":"TEE-M"}]}`

// post sends one order request straight to the simulator.
func post(s *Simulator, path, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

// decode reads a JSON response body into a string map.
func decode(t *testing.T, w *httptest.ResponseRecorder) map[string]string {
	t.Helper()
	var m map[string]string
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	return m
}

func TestSimulatorRequests(t *testing.T) {
	path := "/shops/" + shop + "/orders"
	key := uuid.NewString()
	deny := func(context.Context, string) (bool, error) { return false, nil }
	broken := func(context.Context, string) (bool, error) { return false, errors.New("db down") }

	tests := []struct {
		name       string
		method     string // default POST
		path       string
		key        string
		body       string
		authorized func(context.Context, string) (bool, error)
		status     int
		code       string
	}{
		{name: "created", path: path, key: key, body: validBody, status: 201},
		{name: "GET", method: http.MethodGet, path: path, key: key, status: 405, code: "method_not_allowed"},
		{name: "other path", path: "/shops/" + shop + "/products", key: key, body: validBody, status: 404, code: "not_found"},
		{name: "no shop", path: "/shops//orders", key: key, body: validBody, status: 404, code: "not_found"},
		{name: "nested shop", path: "/shops/a/b/orders", key: key, body: validBody, status: 404, code: "not_found"},
		{name: "root", path: "/", key: key, body: validBody, status: 404, code: "not_found"},
		{name: "unauthorized", path: path, key: key, body: validBody, authorized: deny, status: 401, code: "invalid_credentials"},
		{name: "authorization fails", path: path, key: key, body: validBody, authorized: broken, status: 503, code: "unavailable"},
		{name: "no idempotency key", path: path, body: validBody, status: 400, code: "invalid_idempotency_key"},
		{name: "bad idempotency key", path: path, key: "order-1", body: validBody, status: 400, code: "invalid_idempotency_key"},
		{name: "nil idempotency key", path: path, key: uuid.Nil.String(), body: validBody, status: 400, code: "invalid_idempotency_key"},
		{name: "bad JSON", path: path, key: key, body: `{"order_id":`, status: 422, code: "invalid_order"},
		{name: "not an object", path: path, key: key, body: `[1]`, status: 422, code: "invalid_order"},
		{name: "missing order_id", path: path, key: key, body: `{"line_items":[{}]}`, status: 422, code: "invalid_order"},
		{name: "bad order_id", path: path, key: key, body: `{"order_id":"x","line_items":[{}]}`, status: 422, code: "invalid_order"},
		{name: "missing line_items", path: path, key: key, body: `{"order_id":"` + key + `"}`, status: 422, code: "invalid_order"},
		{name: "null line_items", path: path, key: key, body: `{"order_id":"` + key + `","line_items":null}`, status: 422, code: "invalid_order"},
		{name: "empty line_items", path: path, key: key, body: `{"order_id":"` + key + `","line_items":[]}`, status: 422, code: "invalid_order"},
		{name: "line_items not an array", path: path, key: key, body: `{"order_id":"` + key + `","line_items":{}}`, status: 422, code: "invalid_order"},
		{name: "body too large", path: path, key: key, body: `{"note":"` + strings.Repeat("x", maxBodyBytes) + `"}`, status: 413, code: "too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSimulator(tt.authorized)
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			r := httptest.NewRequest(method, tt.path, strings.NewReader(tt.body))
			if tt.key != "" {
				r.Header.Set("Idempotency-Key", tt.key)
			}
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)

			if w.Code != tt.status {
				t.Fatalf("status = %d, want %d; body %s", w.Code, tt.status, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			m := decode(t, w)
			if tt.status == 201 {
				if m["id"] != "gid://simulator/Order/1" || m["number"] != "#1001" {
					t.Errorf("body = %v", m)
				}
				if n := s.Orders(shop); n != 1 {
					t.Errorf("orders = %d, want 1", n)
				}
				return
			}
			if m["error"] != tt.code || m["message"] == "" {
				t.Errorf("body = %v, want error %q with a message", m, tt.code)
			}
			if n := s.Orders(shop); n != 0 {
				t.Errorf("orders = %d, want 0", n)
			}
			if tt.status == 405 && w.Header().Get("Allow") != http.MethodPost {
				t.Errorf("Allow = %q", w.Header().Get("Allow"))
			}
		})
	}
}

func TestSimulatorCredentialMessage(t *testing.T) {
	var asked string
	s := NewSimulator(func(_ context.Context, d string) (bool, error) {
		asked = d
		return false, nil
	})
	w := post(s, "/shops/"+shop+"/orders", uuid.NewString(), validBody)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("status = %d", w.Code)
	}
	want := map[string]string{"error": "invalid_credentials", "message": "the shop's access credentials were rejected"}
	if m := decode(t, w); m["error"] != want["error"] || m["message"] != want["message"] || len(m) != 2 {
		t.Errorf("body = %v, want %v", m, want)
	}
	if asked != shop {
		t.Errorf("Authorized asked about %q", asked)
	}
}

func TestSimulatorIdempotency(t *testing.T) {
	s := NewSimulator(nil)
	key := uuid.NewString()

	first := post(s, "/shops/"+shop+"/orders", key, validBody)
	if first.Code != http.StatusCreated {
		t.Fatalf("first: status %d", first.Code)
	}
	again := post(s, "/shops/"+shop+"/orders", key, validBody)
	if again.Code != http.StatusOK {
		t.Fatalf("replay: status %d", again.Code)
	}
	if a, b := decode(t, first), decode(t, again); a["id"] != b["id"] || a["number"] != b["number"] {
		t.Errorf("replay = %v, first = %v", b, a)
	}
	if n := s.Orders(shop); n != 1 {
		t.Errorf("orders = %d, want 1", n)
	}

	// Keys belong to a shop: the same key elsewhere is a new order, and the
	// order counter is shared by all shops.
	other := post(s, "/shops/other.example/orders", key, validBody)
	if m := decode(t, other); other.Code != http.StatusCreated || m["number"] != "#1002" {
		t.Errorf("other shop: %d %v", other.Code, m)
	}
	if a, b := s.Orders(shop), s.Orders("other.example"); a != 1 || b != 1 {
		t.Errorf("orders = %d, %d; want 1, 1", a, b)
	}
	if n := s.Orders("unknown.example"); n != 0 {
		t.Errorf("unknown shop has %d orders", n)
	}
}

func TestSimulatorEscapedDomain(t *testing.T) {
	s := NewSimulator(nil)
	w := post(s, "/shops/a%2Fb%20c.example/orders", uuid.NewString(), validBody)
	if w.Code != http.StatusCreated {
		t.Fatalf("status = %d; body %s", w.Code, w.Body)
	}
	if n := s.Orders("a/b c.example"); n != 1 {
		t.Errorf("orders = %d, want 1", n)
	}
}

func TestSimulatorFailNext(t *testing.T) {
	s := NewSimulator(nil)
	s.FailNext(2)
	var got []int
	for range 3 {
		got = append(got, post(s, "/shops/"+shop+"/orders", uuid.NewString(), validBody).Code)
	}
	if fmt.Sprint(got) != "[503 503 201]" {
		t.Errorf("statuses = %v, want [503 503 201]", got)
	}

	s.FailNext(5)
	s.FailNext(0)
	if w := post(s, "/shops/"+shop+"/orders", uuid.NewString(), validBody); w.Code != http.StatusCreated {
		t.Errorf("after FailNext(0): status %d", w.Code)
	}
	s.FailNext(-1)
	if w := post(s, "/shops/"+shop+"/orders", uuid.NewString(), validBody); w.Code != http.StatusCreated {
		t.Errorf("after FailNext(-1): status %d", w.Code)
	}
}

func TestSimulatorZeroValue(t *testing.T) {
	var s Simulator
	if w := post(&s, "/shops/"+shop+"/orders", uuid.NewString(), validBody); w.Code != http.StatusCreated {
		t.Fatalf("status = %d", w.Code)
	}
	if n := s.Orders(shop); n != 1 {
		t.Errorf("orders = %d", n)
	}
}

// TestSimulatorConcurrent repeats a few keys from many goroutines: each key
// must make exactly one order, whichever request comes first.
func TestSimulatorConcurrent(t *testing.T) {
	s := NewSimulator(func(context.Context, string) (bool, error) { return true, nil })
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = uuid.NewString()
	}

	var (
		mu   sync.Mutex
		byID = map[string]map[string]bool{} // key -> ids answered
		wg   sync.WaitGroup
	)
	for i := range 100 {
		key := keys[i%len(keys)]
		wg.Go(func() {
			if i%25 == 0 {
				s.FailNext(0) // exercise the counter alongside requests
			}
			_ = s.Orders(shop)
			w := post(s, "/shops/"+shop+"/orders", key, validBody)
			if w.Code != http.StatusCreated && w.Code != http.StatusOK {
				t.Errorf("status = %d", w.Code)
				return
			}
			var m map[string]string
			if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if byID[key] == nil {
				byID[key] = map[string]bool{}
			}
			byID[key][m["id"]] = true
		})
	}
	wg.Wait()

	if n := s.Orders(shop); n != len(keys) {
		t.Errorf("orders = %d, want %d", n, len(keys))
	}
	seen := map[string]bool{}
	for key, ids := range byID {
		if len(ids) != 1 {
			t.Errorf("key %s answered with ids %v", key, ids)
		}
		for id := range ids {
			if seen[id] {
				t.Errorf("id %s given to two keys", id)
			}
			seen[id] = true
		}
	}
}
