package testenv

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
)

// Client calls the API of a running podsvc.
type Client struct {
	T     testing.TB
	Base  string
	Token string
	HTTP  *http.Client
}

// NewClient returns a client for base ("http://host:port") with token.
func NewClient(t testing.TB, base, token string) *Client {
	return &Client{T: t, Base: base, Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// Response is a received response with its body read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test when it is not JSON.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("response %d is not the expected JSON: %v\n%s", r.Status, err, r.Body)
	}
}

// ErrorBody is the API's error shape.
type ErrorBody struct {
	Error   string         `json:"error"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// Err decodes the error body and checks that error and message are present.
func (r Response) Err(t testing.TB) ErrorBody {
	t.Helper()
	var e ErrorBody
	r.JSON(t, &e)
	if e.Error == "" || e.Message == "" {
		t.Fatalf("error body lacks error or message: %s", r.Body)
	}
	return e
}

// Do sends a request; body may be nil, []byte or a value encoded as JSON.
func (c *Client) Do(method, path string, body any) Response {
	c.T.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			c.T.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, c.Base+path, rd)
	if err != nil {
		c.T.Fatal(err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		c.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.T.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Get is Do("GET", path, nil).
func (c *Client) Get(path string) Response { c.T.Helper(); return c.Do(http.MethodGet, path, nil) }
