package e2e

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/printpod/pod/commands/push"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/testenv"
)

// TestAStoppingPusherFinishesTheCallUnderWay: a pusher stopped (a deploy)
// while its platform call is under way lets the call finish and sends its
// outcome. Before, the call was cut off and its order stayed PROCESSING
// until a takeover, 40 s later at least, called the platform again.
func TestAStoppingPusherFinishesTheCallUnderWay(t *testing.T) {
	waitsMostly(t)
	sim := push.NewSimulator(nil)
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	var cut atomic.Bool
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read first: the server notices a client gone only once the body
		// is read.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		select {
		case held <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
			cut.Store(true)
			return
		case <-release:
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(platform.Close)
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})
	d := startDemo(t, noPusher, func(c *config.Config) { c.PlatformURL = platform.URL })
	logs := &capturedLogs{}
	peer := startWithLogger(t, d.peerConfig(t, func(c *config.Config) { c.Roles = []string{config.RolePusher} }),
		slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	v := d.variant(t, "ACTIVE", "tshirt")
	o := create(t, d.client, tshirtOrder(v.VariantID, "a-call-under-way", 1))
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the platform was not called")
	}
	stopped := make(chan struct{})
	go func() { peer.Stop(); close(stopped) }()
	testenv.Eventually(t, 10*time.Second, func() error {
		if cut.Load() {
			return nil // failed below
		}
		for _, l := range logs.lines(t) {
			if l["msg"] == "pusher stopping; calls under way may finish" {
				return nil
			}
		}
		return fmt.Errorf("the pusher has not begun to stop")
	})
	close(release)
	released = true
	got := d.waitStatus(t, d.client, o.OrderID, "SUCCESS")
	if cut.Load() {
		t.Fatal("the call under way was cut off")
	}
	if n := sim.Orders(d.store(t, "ACTIVE").ShopDomain); n != 1 || got.PlatformOrderID == nil || len(got.DeliveryAttempts) != 1 {
		t.Fatalf("the platform holds %d orders; the order has platform id %v and %d push attempts; want 1, one, 1",
			n, got.PlatformOrderID, len(got.DeliveryAttempts))
	}
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the pusher did not stop")
	}
}
