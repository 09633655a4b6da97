package delivery

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/schemas"
)

// TestSendOutcomes runs the sender's request against real local endpoints
// through the guarded client: what counts as success, and what the
// delivery log is told on failure (never the URL).
func TestSendOutcomes(t *testing.T) {
	var hangups, halves atomic.Int32
	// raw answers with bytes of its own, then closes the connection.
	raw := func(w http.ResponseWriter, answer string) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_, _ = buf.WriteString(answer)
			_ = buf.Flush()
			conn.Close()
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(204)
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/big":
			w.WriteHeader(200)
			_, _ = w.Write(make([]byte, 4*ResponseBodyLimit))
		case "/hangup":
			hangups.Add(1)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case "/hints": // an interim answer first, then the answer
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(204)
		case "/half": // the status line and a header, then nothing
			halves.Add(1)
			raw(w, "HTTP/1.1 200 OK\r\nX-A: b\r\n")
		case "/shortbody": // 2 of the 10 bytes it announced
			halves.Add(1)
			raw(w, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
		case "/twolengths":
			raw(w, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n")
		case "/slow":
			time.Sleep(300 * time.Millisecond)
		case "/":
			if r.URL.RawQuery == "x=1" {
				w.WriteHeader(204)
				return
			}
			w.WriteHeader(500)
		case "/bigheaders", "/hugeheaders":
			n := 8 << 10 // a long policy header, as some endpoints send
			if r.URL.Path == "/hugeheaders" {
				n = ResponseHeaderLimit + 1
			}
			w.Header().Set("Content-Security-Policy", strings.Repeat("a", n))
			w.WriteHeader(200)
		default:
			w.WriteHeader(500)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	port := addr[strings.LastIndex(addr, ":")+1:]
	resolver := &stubResolver{answers: map[string][]netip.Addr{"rebind.test": addrs("127.0.0.1")}}
	guard := &Guard{AllowTargets: []string{addr}, Resolver: resolver}
	s := &Sender{HTTP: guard.Client(200*time.Millisecond, 256), Timeout: 200 * time.Millisecond}
	secret, _ := NewSecret()
	task := schemas.DeliveryTask{EventID: uuid.New(), Topic: "order.created", Payload: []byte(`{"id":"x"}`)}
	cases := []struct {
		url     string
		code    int
		failure string
	}{
		{srv.URL + "/ok", 204, ""},
		{srv.URL + "?x=1", 204, ""}, // no path: sent as "/?x=1"
		{srv.URL + "/bigheaders", 200, ""},
		// Twice: the kept connection stays in step after an interim answer.
		{srv.URL + "/hints", 204, ""},
		{srv.URL + "/hints", 204, ""},
		{srv.URL + "/hugeheaders", 0, "the response's headers are over 64 KiB"},
		{srv.URL + "/fail", 500, "HTTP 500"},
		{srv.URL + "/redirect", 302, "HTTP 302: redirects are not followed"},
		{srv.URL + "/big", 200, ""},
		{srv.URL + "/hangup", 0, "the endpoint closed the connection without a response"},
		{srv.URL + "/half", 0, "the endpoint closed the connection in the middle of its response"},
		{srv.URL + "/shortbody", 0, "the endpoint closed the connection in the middle of its response"},
		{srv.URL + "/twolengths", 0, "the response is not valid HTTP/1.1"},
		{srv.URL + "/slow", 0, "timeout: no response within 200ms"},
		{"http://rebind.test:" + port + "/ok", 0, "refused: the target resolves to a private, loopback or otherwise internal address"},
		{"http://10.0.0.1:" + port + "/ok", 0, "refused: the target resolves to a private, loopback or otherwise internal address"},
	}
	for _, tc := range cases {
		code, failure := s.send(&Hook{URL: tc.url, Secret: secret}, task)
		if code != tc.code || failure != tc.failure {
			t.Errorf("%s: %d %q, want %d %q", tc.url, code, failure, tc.code, tc.failure)
		}
		if strings.Contains(failure, "127.0.0.1") || strings.Contains(failure, "rebind") {
			t.Errorf("failure text names the target: %q", failure)
		}
	}
	// A hang-up is tried once more on a new connection, never more.
	if n := hangups.Load(); n != 2 {
		t.Errorf("the endpoint that hangs up was asked %d times, want 2", n)
	}
	// An answer cut short is not a hang-up: the endpoint had the request.
	if n := halves.Load(); n != 2 {
		t.Errorf("the endpoints that answered half were asked %d times, want once each", n)
	}
	// The URL rules are applied again before each request: a URL stored
	// outside production is refused by a production sender without a
	// request.
	prod := &Sender{HTTP: guard.Client(200*time.Millisecond, 256), Guard: &Guard{Production: true}, Timeout: 200 * time.Millisecond}
	before := hangups.Load()
	if code, failure := prod.send(&Hook{URL: srv.URL + "/hangup", Secret: secret}, task); code != 0 || failure != "refused: url must use https" {
		t.Errorf("a production sender sent to %s: %d %q", srv.URL, code, failure)
	}
	if hangups.Load() != before {
		t.Errorf("a production sender made a request to an http URL")
	}
}

func TestDeferTier(t *testing.T) {
	def := []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour}
	for _, tc := range []struct {
		drain time.Duration
		want  int
	}{
		{0, 0},
		{11 * time.Second, 0},
		{time.Minute, 0},
		{61 * time.Second, 1},
		{320 * time.Second, 2}, // 256 tasks of a 10 s endpoint, 8 at a time
		{3 * time.Hour, 4},
		{48 * time.Hour, 5},
	} {
		if got := DeferTier(def, tc.drain); got != tc.want {
			t.Errorf("DeferTier(%s) = %d, want %d", tc.drain, got, tc.want)
		}
	}
	if got := DeferTier([]time.Duration{time.Second, time.Second}, time.Hour); got != 1 {
		t.Errorf("equal short tiers: %d, want the last", got)
	}
}
