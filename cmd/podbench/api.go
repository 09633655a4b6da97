package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/valyala/fasthttp"
)

// newHTTPClient is the client of the load and of the HTTP baseline:
// keep-alive with up to conns connections, no proxy, no compression,
// HTTP/1.1 (what podsvc's Fiber server speaks). It is fasthttp's, which
// writes and reads in the calling goroutine: net/http's transport runs two
// more per connection, and podbench shares the machine podsvc is measured
// on. No request is sent twice (a create sent twice is not the load the
// report describes): one attempt, whatever a later fasthttp's default for
// a connection closed without an answer. The idle connections it
// keeps are closed before podsvc's own idle timeout (2 minutes) would.
func newHTTPClient(conns int, timeout time.Duration) *fasthttp.Client {
	return &fasthttp.Client{
		MaxConnsPerHost:           conns,
		MaxIdemponentCallAttempts: 1,
		MaxConnWaitTimeout:        timeout,
		MaxIdleConnDuration:       90 * time.Second,
		ReadTimeout:               timeout,
		WriteTimeout:              timeout,
		NoDefaultUserAgentHeader:  true,
		Dial:                      (&fasthttp.TCPDialer{}).Dial,
	}
}

// api calls podsvc's public API with the bearer token.
type api struct {
	base  string
	token string
	hc    *fasthttp.Client
}

// do sends one request and reads the whole answer.
func (a *api) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return a.doOn(ctx, a.base, method, path, body)
}

// doOn is do on another podsvc of the same service (a replica). The
// request ends by ctx's deadline when that comes before the client's
// timeout; a cancelled ctx stops no request already sent.
func (a *api) doOn(ctx context.Context, base, method, path string, body []byte) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(base + path)
	req.Header.SetMethod(method)
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
	}
	deadline := time.Now().Add(a.hc.ReadTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := a.hc.DoDeadline(req, resp, deadline); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), bytes.Clone(resp.Body()), nil
}

// apiError is a non-2xx answer of a setup call.
type apiError struct {
	Method, Path string
	Status       int
	Code         string
	Body         string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, e.Body)
}

// call sends a setup request and decodes a 2xx JSON answer into out (when
// not nil); other statuses are an *apiError.
func (a *api) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	st, raw, err := a.do(ctx, method, path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if st/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		return &apiError{Method: method, Path: path, Status: st, Code: e.Error, Body: string(bytes.TrimSpace(raw))}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: answer is not the expected JSON: %w", method, path, err)
		}
	}
	return nil
}

// classify tells a refused connection (the request never reached the
// service) from every other transport failure (it may have).
func classify(err error) outcome {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return refused
	}
	return noAnswer
}

// waitReady polls /readyz until it answers 200.
func waitReady(ctx context.Context, base string, timeout time.Duration, alive func() error) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if alive != nil {
			if err := alive(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s/readyz not ready after %s", base, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
