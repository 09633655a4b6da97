package push

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
)

// Simulator is an in-memory stand-in for the store platform, speaking the
// protocol Client uses. The service runs it in development; tests mount it
// on an httptest server. The zero value is ready to use.
type Simulator struct {
	// Authorized reports whether a shop's credentials work; shops whose
	// store has status CREDENTIAL_ERROR should answer false. nil means
	// every shop is authorized. Set it before serving requests.
	Authorized func(ctx context.Context, shopDomain string) (bool, error)

	mu       sync.Mutex
	failNext int                 // requests still to answer 503
	seq      int                 // orders created so far, across shops
	shops    map[string]*simShop // by shop domain
}

// simShop is what the simulator remembers of one shop.
type simShop struct {
	byKey map[uuid.UUID]simOrder // created orders by idempotency key
}

type simOrder struct {
	ID     string `json:"id"`
	Number string `json:"number"`
}

// NewSimulator returns a simulator that asks authorized whether a shop's
// credentials work; nil authorizes every shop.
func NewSimulator(authorized func(ctx context.Context, shopDomain string) (bool, error)) *Simulator {
	return &Simulator{Authorized: authorized}
}

// FailNext makes the next n requests, whatever they are, answer 503. It
// replaces any count still pending; n <= 0 clears it.
func (s *Simulator) FailNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = max(n, 0)
}

// Orders reports how many distinct orders the shop has received; repeats
// under an idempotency key already seen do not count.
func (s *Simulator) Orders(shopDomain string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sh := s.shops[shopDomain]; sh != nil {
		return len(sh.byKey)
	}
	return 0
}

// ServeHTTP serves POST /shops/{domain}/orders.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.takeFailure() {
		simError(w, http.StatusServiceUnavailable, "unavailable", "simulated outage")
		return
	}

	domain, ok := orderPath(r.URL)
	if !ok {
		simError(w, http.StatusNotFound, "not_found", "no such resource")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		simError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
		return
	}

	if s.Authorized != nil {
		ok, err := s.Authorized(r.Context(), domain)
		if err != nil {
			simError(w, http.StatusServiceUnavailable, "unavailable", "cannot check the shop's credentials")
			return
		}
		if !ok {
			simError(w, http.StatusUnauthorized, "invalid_credentials", "the shop's access credentials were rejected")
			return
		}
	}

	key, err := uuid.Parse(r.Header.Get("Idempotency-Key"))
	if err != nil || key == uuid.Nil {
		simError(w, http.StatusBadRequest, "invalid_idempotency_key", "Idempotency-Key must be a UUID")
		return
	}

	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			simError(w, http.StatusRequestEntityTooLarge, "too_large", "order body is too large")
			return
		}
		simError(w, http.StatusBadRequest, "bad_request", "cannot read the body")
		return
	}
	if msg := checkOrder(data); msg != "" {
		simError(w, http.StatusUnprocessableEntity, "invalid_order", msg)
		return
	}

	o, created := s.createOrder(domain, key)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, o)
}

// takeFailure uses up one simulated failure, if any are pending.
func (s *Simulator) takeFailure() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failNext == 0 {
		return false
	}
	s.failNext--
	return true
}

// createOrder returns the order stored under key, or creates it. Lookup and
// creation share one lock, so concurrent repeats still make one order.
func (s *Simulator) createOrder(domain string, key uuid.UUID) (simOrder, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shops[domain]
	if sh == nil {
		if s.shops == nil {
			s.shops = make(map[string]*simShop)
		}
		sh = &simShop{byKey: make(map[uuid.UUID]simOrder)}
		s.shops[domain] = sh
	}
	if o, ok := sh.byKey[key]; ok {
		return o, false
	}
	s.seq++
	o := simOrder{
		ID:     fmt.Sprintf("gid://simulator/Order/%d", s.seq),
		Number: fmt.Sprintf("#%d", 1000+s.seq),
	}
	sh.byKey[key] = o
	return o, true
}

// orderPath extracts the shop domain from /shops/{domain}/orders. It works on
// the escaped path so a domain holding an escaped slash stays one segment.
func orderPath(u *url.URL) (string, bool) {
	rest, ok := strings.CutPrefix(u.EscapedPath(), "/shops/")
	if !ok {
		return "", false
	}
	seg, ok := strings.CutSuffix(rest, "/orders")
	if !ok || seg == "" || strings.Contains(seg, "/") {
		return "", false
	}
	domain, err := url.PathUnescape(seg)
	if err != nil || domain == "" {
		return "", false
	}
	return domain, true
}

// checkOrder returns why the body is not an acceptable order, or "".
func checkOrder(data []byte) string {
	var o struct {
		OrderID   uuid.UUID       `json:"order_id"`
		LineItems json.RawMessage `json:"line_items"`
	}
	if err := json.Unmarshal(data, &o); err != nil {
		return "body is not a valid order: " + err.Error()
	}
	if o.OrderID == uuid.Nil {
		return "order_id is required"
	}
	var items []json.RawMessage
	if len(bytes.TrimSpace(o.LineItems)) == 0 || json.Unmarshal(o.LineItems, &items) != nil || len(items) == 0 {
		return "line_items must be a non-empty array"
	}
	return ""
}

func simError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
