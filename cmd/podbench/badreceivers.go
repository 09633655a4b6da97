package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// badReceiver is a webhook endpoint that always fails, each in its own way
// and on its own port, so the service sees a separate misbehaving host:
//   - timeout: holds the request longer than the service's webhook timeout;
//   - reset: reads the request, then resets the connection (SO_LINGER 0);
//   - redirect: answers 302 to the good receiver, which counts any request
//     that follows it (redirects must not be followed).
type badReceiver struct {
	kind     string
	addr     string
	url      string
	srv      *http.Server
	requests atomic.Int64
	mu       sync.Mutex
	ids      map[string]int
}

// badReport is what one bad receiver saw and what the API says of its webhook.
type badReport struct {
	Kind                string  `json:"kind"`
	Requests            int64   `json:"requests"`
	Events              int     `json:"events"`
	IsActive            *bool   `json:"is_active,omitempty"`
	ConsecutiveFailures *int    `json:"consecutive_failures,omitempty"`
	DisabledReason      *string `json:"disabled_reason,omitempty"`
}

// badAddr is the listen address of the i-th bad receiver: the next ports
// after a fixed receiver port (so they can be allowed in advance), else any.
func badAddr(receiverAddr string, i int) string {
	host, port, err := net.SplitHostPort(receiverAddr)
	if err != nil {
		return "127.0.0.1:0"
	}
	p, _ := strconv.Atoi(port)
	if p == 0 {
		return net.JoinHostPort(host, "0")
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1+i))
}

func startBadReceiver(kind, addr, goodURL string, sleep time.Duration) (*badReceiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s receiver: %w", kind, err)
	}
	b := &badReceiver{kind: kind, addr: ln.Addr().String(), ids: map[string]int{}}
	b.url = "http://" + b.addr + "/hooks/" + kind
	var h http.HandlerFunc
	switch kind {
	case "timeout":
		h = func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(sleep):
			case <-r.Context().Done(): // the sender gave up
			}
			w.WriteHeader(http.StatusNoContent)
		}
	case "reset":
		h = func(w http.ResponseWriter, r *http.Request) {
			hj, ok := w.(http.Hijacker)
			if !ok {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			conn, _, err := hj.Hijack()
			if err != nil {
				return
			}
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close sends RST
			}
			_ = conn.Close()
		}
	case "redirect":
		h = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", goodURL+followedPath)
			w.WriteHeader(http.StatusFound)
		}
	default:
		_ = ln.Close()
		return nil, fmt.Errorf("unknown bad receiver %q", kind)
	}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		b.mu.Lock()
		b.ids[r.Header.Get("X-Webhook-Id")]++
		b.mu.Unlock()
		h(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

func (b *badReceiver) close() { _ = b.srv.Close() }

func (b *badReceiver) report() badReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	return badReport{Kind: b.kind, Requests: b.requests.Load(), Events: len(b.ids)}
}
