package e2e

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/cmd/podsvc/app"
	"github.com/printpod/pod/internal/accounts"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/logging"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
)

// capturedLogs is the service's own JSON logger writing into memory.
type capturedLogs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *capturedLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// lines parses every line; a line that is not one JSON object fails the test.
func (l *capturedLogs) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue // nothing logged yet
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}

func (l *capturedLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startLogged starts podsvc with its own production logger at debug level
// writing into memory.
func startLogged(t *testing.T, cfg config.Config) (*app.App, *capturedLogs) {
	t.Helper()
	logs := &capturedLogs{}
	return startWithLogger(t, cfg, logging.New(logs, "debug")), logs
}

// startWithLogger starts podsvc with log and stops it when the test ends.
func startWithLogger(t *testing.T, cfg config.Config, log *slog.Logger) *app.App {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := app.Start(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

func withRequestID(t *testing.T, method, url, token, id string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestLogsCarryRequestIDsAndNoCredentials runs the service with its own
// production logger at debug level: every line is JSON, every request's
// line carries its request id (the caller's when it is sane, else a new
// one, echoed in X-Request-Id), and a token never appears.
func TestLogsCarryRequestIDsAndNoCredentials(t *testing.T) {
	cfg := podtest.Config(t)
	cfg.LogLevel = "debug"
	a, logs := startLogged(t, cfg)
	_, token, err := accounts.Store{Pool: a.Pool}.Create(context.Background(), "log-check")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + a.Addr()

	cases := []struct {
		name, sent string
		keep       bool // the caller's id is used
	}{
		{"caller's id kept", "trace-" + uuid.NewString()[:8], true},
		{"none sent", "", false},
		{"spaces replaced", "two words", false},
		{"too long replaced", strings.Repeat("x", 129), false},
		{"tab replaced", "a\tb", false},
		{"non-ASCII replaced", "caf\u00e9", false},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		resp := withRequestID(t, "GET", base+"/v1/stores", token, tc.sent)
		got := resp.Header.Get("X-Request-Id")
		switch {
		case tc.keep && got != tc.sent:
			t.Errorf("%s: X-Request-Id %q, want %q", tc.name, got, tc.sent)
		case !tc.keep && uuid.Validate(got) != nil:
			t.Errorf("%s: X-Request-Id %q is not a fresh UUID", tc.name, got)
		}
		if seen[got] {
			t.Errorf("%s: request id %q given twice", tc.name, got)
		}
		seen[got] = true
	}
	// A request that fails authentication is logged with its id too.
	bad := withRequestID(t, "GET", base+"/v1/stores", "not-a-token", "unauth-1")
	if bad.StatusCode != 401 {
		t.Fatalf("bad token: %d", bad.StatusCode)
	}
	seen["unauth-1"] = true

	testenv.Eventually(t, 10*time.Second, func() error {
		logged := map[string]bool{}
		for _, l := range logs.lines(t) {
			if l["msg"] == "request" {
				id, _ := l["request_id"].(string)
				logged[id] = true
			}
		}
		for id := range seen {
			if !logged[id] {
				return fmt.Errorf("no request log line with request_id %q", id)
			}
		}
		return nil
	})
	for _, secret := range []string{token, "not-a-token"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("a token appears in the logs")
		}
	}
}

// TestHandlerWarningsCarryTheRequestID: with Redis unreachable, the warning
// written while answering a request names that request.
func TestHandlerWarningsCarryTheRequestID(t *testing.T) {
	d := startDemo(t)
	a, logs := startLogged(t, d.peerConfig(t, func(c *config.Config) {
		c.RedisURL = "redis://127.0.0.1:1/0"
		c.Roles = []string{config.RoleAPI}
		c.DemoToken = ""
	}))

	req, err := http.NewRequest("POST", "http://"+a.Addr()+"/v1/orders/pod", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.cfg.DemoToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-"+uuid.NewString())
	req.Header.Set("X-Request-Id", "redis-down-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("POST with Idempotency-Key and Redis down: %d, want 503", resp.StatusCode)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, l := range logs.lines(t) {
			if l["msg"] == "idempotency store unavailable" {
				if l["request_id"] != "redis-down-1" {
					return fmt.Errorf("warning without the request id: %v", l)
				}
				return nil
			}
		}
		return fmt.Errorf("no idempotency warning logged")
	})
}

// TestAHangingRedisDoesNotHoldCreates points an API at a Redis that
// accepts connections and never answers: the rate limit and the soft
// duplicate claim give up after their short timeouts, so a create still
// answers 201 well within the client's 5 s.
func TestAHangingRedisDoesNotHoldCreates(t *testing.T) {
	d := startDemo(t)
	v := d.variant(t, "ACTIVE", "tshirt")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	a, _ := startLogged(t, d.peerConfig(t, func(c *config.Config) {
		c.RedisURL = "redis://" + ln.Addr().String() + "/0"
		c.Roles = []string{config.RoleAPI}
		c.DemoToken = ""
	}))
	c := testenv.NewClient(t, "http://"+a.Addr(), d.cfg.DemoToken)
	// The fresh peer's first create also waits for its producer and the
	// topics' metadata, seconds on a slow real cluster: it has 30 s. The
	// three after it have 5 s, where Redis's own client would hold each
	// of its calls 3 s.
	c.HTTP.Timeout = 30 * time.Second
	if r := c.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "hang-first", 1)); r.Status != 201 {
		t.Fatalf("first create with Redis hanging: %d %s", r.Status, r.Body)
	}
	c.HTTP.Timeout = 5 * time.Second
	for i := range 3 {
		r := c.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, fmt.Sprintf("hang-%d", i), 1))
		if r.Status != 201 {
			t.Fatalf("create %d with Redis hanging: %d %s", i, r.Status, r.Body)
		}
	}
}
