package delivery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/printpod/pod/schemas"
)

// send makes the HTTP request; failure is "" on a 2xx, else a short
// description (never containing the URL or a secret).
func (s *Sender) send(ctx context.Context, hook *Hook, t schemas.DeliveryTask) (code int, failure string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL, bytes.NewReader(t.Payload))
	if err != nil {
		return 0, "the webhook url cannot be requested"
	}
	ts := time.Now().Unix()
	id := t.EventID.String()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set("X-Webhook-Id", id)
	req.Header.Set("X-Webhook-Topic", t.Topic)
	req.Header.Set("X-Webhook-Timestamp", fmt.Sprint(ts))
	req.Header.Set("X-Webhook-Signature", Signature(hook.Secret, ts, t.Payload))
	std, err := StandardSignature(hook.Secret, id, ts, t.Payload)
	if err != nil {
		return 0, "signing failed"
	}
	if hook.PreviousSecret != "" {
		if old, err := StandardSignature(hook.PreviousSecret, id, ts, t.Payload); err == nil {
			std += " " + old
		}
	}
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", fmt.Sprint(ts))
	req.Header.Set("webhook-signature", std)
	resp, err := s.HTTP.Do(req)
	if err != nil {
		return 0, describe(err, s.Timeout)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, ""
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return resp.StatusCode, fmt.Sprintf("HTTP %d: redirects are not followed", resp.StatusCode)
	}
	return resp.StatusCode, fmt.Sprintf("HTTP %d", resp.StatusCode)
}

// describe turns a request error into a short, URL-free description.
func describe(err error, timeout time.Duration) string {
	var nerr net.Error
	switch {
	case errors.Is(err, ErrBlockedTarget):
		return "refused: the target resolves to a private, loopback or otherwise internal address"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout()):
		return fmt.Sprintf("timeout: no response within %s", timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset by the endpoint"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "the endpoint closed the connection without a response"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "the host name could not be resolved"
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return "connection failed: " + opErr.Err.Error()
	}
	return "request failed"
}
