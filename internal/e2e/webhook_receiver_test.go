package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/printpod/pod/internal/config"
)

// received is one request a receiver got, with what it checked.
type received struct {
	At        time.Time
	ID        string
	Topic     string
	Timestamp string
	Header    http.Header
	Body      []byte
	// SigOK: X-Webhook-Signature verified with the receiver's own HMAC
	// code; StdOK: the Standard Webhooks signature likewise (with any of
	// the secrets the receiver knows).
	SigOK, StdOK bool
	Status       int // what the receiver answered
}

// receiver is a real local webhook endpoint. It verifies both signature
// schemes with code written here (not the service's), and answers what
// respond says (200 by default).
type receiver struct {
	t   testing.TB
	srv *httptest.Server

	mu      sync.Mutex
	secrets []string // accepted secrets, newest first
	got     []received
	respond func(r received, n int) int // n: how many requests with this id came before
	delay   func(r received) time.Duration
	active  int // requests being handled now

	released    chan struct{} // closed by release: delays end at once
	releaseOnce sync.Once
}

func newReceiver(t testing.TB) *receiver {
	rc := &receiver{t: t, released: make(chan struct{})}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.handle))
	t.Cleanup(rc.srv.Close)
	return rc
}

// addr is the receiver's host:port, for POD_WEBHOOK_ALLOW_TARGETS.
func (rc *receiver) addr() string { return strings.TrimPrefix(rc.srv.URL, "http://") }

func (rc *receiver) url(path string) string { return rc.srv.URL + path }

// allow lets the service call these receivers (development only).
func allow(rcs ...*receiver) func(*config.Config) {
	return func(c *config.Config) {
		for _, rc := range rcs {
			c.WebhookAllowTargets = append(c.WebhookAllowTargets, rc.addr())
		}
	}
}

func (rc *receiver) setSecret(s ...string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.secrets = s
}

func (rc *receiver) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec := received{At: time.Now(), ID: r.Header.Get("X-Webhook-Id"), Topic: r.Header.Get("X-Webhook-Topic"),
		Timestamp: r.Header.Get("X-Webhook-Timestamp"), Header: r.Header.Clone(), Body: body}
	rc.mu.Lock()
	for _, s := range rc.secrets {
		rec.SigOK = rec.SigOK || verifyInterfaceSignature(s, rec.Timestamp, body, r.Header.Get("X-Webhook-Signature"))
		rec.StdOK = rec.StdOK || verifyStandardSignature(s, r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), body,
			r.Header.Get("webhook-signature"))
	}
	n := 0
	for _, g := range rc.got {
		if g.ID == rec.ID {
			n++
		}
	}
	rec.Status = 200
	if rc.respond != nil {
		rec.Status = rc.respond(rec, n)
	}
	delay := time.Duration(0)
	if rc.delay != nil {
		delay = rc.delay(rec)
	}
	rc.active++
	rc.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		case <-rc.released:
		}
	}
	rc.mu.Lock()
	rc.active--
	rc.got = append(rc.got, rec)
	rc.mu.Unlock()
	w.WriteHeader(rec.Status)
}

// release ends every delay, those under way and those to come.
func (rc *receiver) release() { rc.releaseOnce.Do(func() { close(rc.released) }) }

// requests returns a copy of everything received so far.
func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// inFlight is how many requests the receiver is still holding.
func (rc *receiver) inFlight() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.active
}

// verifyInterfaceSignature checks 'sha256=' + hex(HMAC-SHA256(secret
// string, timestamp + "." + body)) in constant time, over the raw bytes.
func verifyInterfaceSignature(secret, timestamp string, body []byte, header string) bool {
	if _, err := strconv.ParseInt(timestamp, 10, 64); err != nil || !strings.HasPrefix(header, "sha256=") {
		return false
	}
	got, err := hex.DecodeString(strings.TrimPrefix(header, "sha256="))
	if err != nil || strings.ToLower(header) != header {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp + "."))
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// verifyStandardSignature checks any "v1,<base64>" entry of a Standard
// Webhooks signature header: HMAC-SHA256 keyed with the base64-decoded
// part of the secret after whsec_, over id.timestamp.body.
func verifyStandardSignature(secret, id, timestamp string, body []byte, header string) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || id == "" || timestamp == "" {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	want := []byte(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	for _, part := range strings.Fields(header) {
		version, sig, ok := strings.Cut(part, ",")
		if ok && version == "v1" && subtle.ConstantTimeCompare([]byte(sig), want) == 1 {
			return true
		}
	}
	return false
}
