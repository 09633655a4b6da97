package delivery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/printpod/pod/schemas"
	"github.com/valyala/fasthttp"
)

// send makes the HTTP request; failure is "" on a 2xx, else a short
// description (never containing the URL or a secret).
func (s *Sender) send(hook *Hook, t schemas.DeliveryTask) (code int, failure string) {
	if s.Guard != nil {
		if err := s.Guard.CheckURL(hook.URL); err != nil {
			return 0, "refused: " + err.Error()
		}
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer func() {
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}()
	req.SetRequestURI(hook.URL)
	if len(req.URI().PathOriginal()) == 0 {
		// https://host?x=1 would go out as "POST ?x=1", which servers refuse.
		req.URI().SetPath("/")
	}
	req.Header.SetMethod(fasthttp.MethodPost)
	ts := time.Now().Unix()
	tsText := strconv.FormatInt(ts, 10)
	id := t.EventID.String()
	std, err := StandardSignature(hook.Secret, id, ts, t.Payload)
	if err != nil {
		return 0, "signing failed"
	}
	if hook.PreviousSecret != "" {
		if old, err := StandardSignature(hook.PreviousSecret, id, ts, t.Payload); err == nil {
			std += " " + old
		}
	}
	req.Header.SetContentType("application/json")
	req.Header.SetUserAgent(UserAgent)
	req.Header.Set("X-Webhook-Id", id)
	req.Header.Set("X-Webhook-Topic", t.Topic)
	req.Header.Set("X-Webhook-Timestamp", tsText)
	req.Header.Set("X-Webhook-Signature", Signature(hook.Secret, ts, t.Payload))
	req.Header.Set("Webhook-Id", id)
	req.Header.Set("Webhook-Timestamp", tsText)
	req.Header.Set("Webhook-Signature", std)
	req.SetBodyRaw(t.Payload)
	err = s.HTTP.DoTimeout(req, resp, s.Timeout)
	if err != nil && !errors.Is(err, fasthttp.ErrBodyTooLarge) {
		// A body past the limit still came with its status.
		return 0, describe(err, s.Timeout)
	}
	code = resp.StatusCode()
	switch {
	case code >= 200 && code < 300:
		return code, ""
	case code >= 300 && code < 400:
		return code, fmt.Sprintf("HTTP %d: redirects are not followed", code)
	}
	return code, fmt.Sprintf("HTTP %d", code)
}

// readingHeaders begins fasthttp's one wording for an answer whose status
// line and headers it could not read (two Content-Length headers, lines
// that end without CR, the connection closed amid them).
const readingHeaders = "error when reading response headers"

// describe turns a request error into a short, URL-free description.
func describe(err error, timeout time.Duration) string {
	var timeoutErr interface{ Timeout() bool }
	switch {
	case errors.Is(err, ErrBlockedTarget):
		return "refused: the target resolves to a private, loopback or otherwise internal address"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, fasthttp.ErrTLSHandshakeTimeout) || (errors.As(err, &timeoutErr) && timeoutErr.Timeout()):
		return fmt.Sprintf("timeout: no response within %s", timeout)
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return fmt.Sprintf("timeout: no connection to the endpoint free within %s", timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset by the endpoint"
	case errors.Is(err, io.ErrUnexpectedEOF) || (errors.Is(err, io.EOF) && strings.HasPrefix(err.Error(), readingHeaders)):
		return "the endpoint closed the connection in the middle of its response"
	case errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed):
		return "the endpoint closed the connection without a response"
	case errors.As(err, new(*fasthttp.ErrSmallBuffer)):
		return fmt.Sprintf("the response's headers are over %d KiB", ResponseHeaderLimit>>10)
	case strings.HasPrefix(err.Error(), readingHeaders) || errors.As(err, new(fasthttp.ErrBrokenChunk)):
		return "the response is not valid HTTP/1.1"
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
