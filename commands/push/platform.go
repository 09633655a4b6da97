package push

// This file is the client for the store platform (the e-commerce platform a
// shop runs on, which print-on-demand orders are pushed to).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/sethvargo/go-retry"
)

// Defaults used when the matching Client field is left zero.
const (
	DefaultTimeout = 10 * time.Second
	maxBodyBytes   = 1 << 20
	userAgent      = "pod-pusher/1"
)

// Client creates orders on the store platform. The zero value needs only
// BaseURL; it is safe for concurrent use.
type Client struct {
	// BaseURL is the platform's root, e.g. http://127.0.0.1:9000.
	BaseURL string
	// HTTP sends the requests; nil means one shared by the zero-value
	// clients, which keeps DefaultCalls idle connections per platform host.
	// Redirects are never followed, whatever the client's CheckRedirect
	// says.
	HTTP *http.Client
	// Timeout bounds each attempt, body read included; zero means 10s.
	Timeout time.Duration
	// Backoff returns a fresh backoff for one CreateOrder call. It is a
	// constructor rather than a value because go-retry backoffs keep state
	// (attempt counters), so one value must not be shared between calls.
	// nil means exponential from 200ms, capped at 2s, at most 3 retries.
	Backoff func() retry.Backoff
}

// DefaultCalls is how many platform calls a worker makes at once unless
// told otherwise.
const DefaultCalls = 16

// defaultHTTP keeps an idle connection for each call a worker makes at
// once. http.DefaultClient keeps two per host, so every call beyond two
// dialed a connection and closed it after: 2% of the service's CPU in a
// 1,000 orders/s run.
var defaultHTTP = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = DefaultCalls
	return &http.Client{Transport: t}
}()

// Order is the body of an order sent to the platform; the order decider
// writes it into the order's push job.
type Order = order.PlatformOrder

// Result identifies the order the platform created.
type Result struct {
	PlatformOrderID     string
	PlatformOrderNumber string
}

// Error is a failed order creation. Permanent errors (the platform rejected
// the request) will fail again if resent unchanged; the others (5xx, 408,
// 429, timeouts, network errors) outlasted the client's retries and may
// succeed later with the same idempotency key.
type Error struct {
	Status    int    // HTTP status; 0 when no response arrived
	Code      string // the platform's error code ("error" in the body), if any
	Message   string
	Permanent bool
}

func (e *Error) Error() string {
	kind := "transient"
	if e.Permanent {
		kind = "permanent"
	}
	if e.Status == 0 {
		return fmt.Sprintf("store platform: %s error: %s", kind, e.Message)
	}
	return fmt.Sprintf("store platform: %s error: status %d: %s", kind, e.Status, e.Message)
}

// defaultBackoff waits 200ms, 400ms, 800ms between the four attempts.
func defaultBackoff() retry.Backoff {
	return retry.WithMaxRetries(3, retry.WithCappedDuration(2*time.Second, retry.NewExponential(200*time.Millisecond)))
}

// noRedirect makes the client hand back a 3xx response instead of following it.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// CreateOrder posts o to the shop on the platform. The idempotency key must
// stay the same for every try of the same order, so the platform can answer
// a repeat with the order it already created. Transient failures are retried
// within the call; when they persist, or the platform rejects the order, the
// error is an *Error. When ctx ends first, its error is returned instead.
func (c *Client) CreateOrder(ctx context.Context, shopDomain string, idempotencyKey uuid.UUID, o Order) (Result, error) {
	if shopDomain == "" {
		return Result{}, &Error{Message: "empty shop domain", Permanent: true}
	}
	if idempotencyKey == uuid.Nil {
		return Result{}, &Error{Message: "nil idempotency key", Permanent: true}
	}
	body, err := json.Marshal(o)
	if err != nil {
		return Result{}, &Error{Message: "encode order: " + err.Error(), Permanent: true}
	}
	endpoint := strings.TrimRight(c.BaseURL, "/") + "/shops/" + url.PathEscape(shopDomain) + "/orders"

	// Copy the client so the no-redirect rule never touches the caller's.
	hc := *defaultHTTP
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	hc.CheckRedirect = noRedirect

	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	backoff := defaultBackoff()
	if c.Backoff != nil {
		backoff = c.Backoff()
	}

	return retry.DoValue(ctx, backoff, func(ctx context.Context) (Result, error) {
		return c.attempt(ctx, &hc, timeout, endpoint, idempotencyKey, body)
	})
}

// attempt sends the request once. Errors worth retrying come back wrapped in
// retry.RetryableError; an ended ctx comes back as its cause.
func (c *Client) attempt(ctx context.Context, hc *http.Client, timeout time.Duration, endpoint string, key uuid.UUID, body []byte) (Result, error) {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(actx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return Result{}, &Error{Message: "build request: " + err.Error(), Permanent: true}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", key.String())
	req.Header.Set("User-Agent", userAgent)

	resp, err := hc.Do(req)
	if err != nil {
		return Result{}, failedExchange(ctx, actx, timeout, err)
	}
	defer func() {
		// Drain a little so the connection can be reused, then let go.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		return Result{}, failedExchange(ctx, actx, timeout, err)
	}

	switch s := resp.StatusCode; {
	case s == http.StatusOK || s == http.StatusCreated:
		var ok struct {
			ID     string `json:"id"`
			Number string `json:"number"`
		}
		if err := json.Unmarshal(data, &ok); err != nil || ok.ID == "" || !keepable(ok.ID) || !keepable(ok.Number) {
			// The order may exist, but resending under the same idempotency
			// key only returns it again, so this is safe to retry. An id
			// that is no text to keep (a NUL, control characters, too
			// long) counts as unreadable: the read model could not store
			// it.
			return Result{}, retry.RetryableError(&Error{Status: s, Message: "unreadable success response"})
		}
		return Result{PlatformOrderID: ok.ID, PlatformOrderNumber: ok.Number}, nil
	case s >= 500, s == http.StatusRequestTimeout, s == http.StatusTooManyRequests:
		return Result{}, retry.RetryableError(statusError(s, data, false))
	default:
		// Other 2xx, 3xx and 4xx: resending will not change the answer.
		return Result{}, statusError(s, data, true)
	}
}

// failedExchange classifies an error from sending a request or reading its
// response: the caller's ctx ending stops the retries, anything else (the
// attempt's own timeout, a refused or dropped connection) is retried.
func failedExchange(ctx, actx context.Context, timeout time.Duration, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if actx.Err() != nil {
		return retry.RetryableError(&Error{Message: fmt.Sprintf("request timed out after %s", timeout)})
	}
	return retry.RetryableError(&Error{Message: "connection error: " + err.Error()})
}

// statusError builds an *Error from an unsuccessful response, taking the
// platform's {"error", "message"} body when it has one.
func statusError(status int, data []byte, permanent bool) *Error {
	e := &Error{Status: status, Permanent: permanent}
	var body struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &body) == nil {
		e.Code = printable(body.Error, maxIDBytes)
		e.Message = printable(body.Message, maxMessageBytes)
	}
	if e.Message == "" {
		e.Message = e.Code
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	if e.Message == "" {
		e.Message = "unexpected status"
	}
	return e
}

// The most of a platform's answer kept: its order id and number, and its
// error code, maxIDBytes each; its error message, maxMessageBytes.
const (
	maxIDBytes      = 255
	maxMessageBytes = 500
)

// keepable reports whether s, an order id or number a platform answered,
// is text the order's records and read model can keep as it is: valid
// UTF-8 of at most maxIDBytes, with no control or format characters (a
// NUL, which Postgres text cannot hold, among them).
func keepable(s string) bool {
	return len(s) <= maxIDBytes && utf8.ValidString(s) && strings.IndexFunc(s, order.Invisible) < 0
}

// printable is s, a platform's error code or message, made text to keep:
// what is not valid UTF-8 or is a control or format character becomes a
// space, and it is cut, at a character, to at most max bytes.
func printable(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || order.Invisible(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, " "))
	return cut(s, max)
}

// cut is s cut, at a character, to at most max bytes.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	end := max
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end]
}

// IsPermanent reports whether err is an *Error the platform will repeat
// however often the order is resent.
func IsPermanent(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Permanent
}
