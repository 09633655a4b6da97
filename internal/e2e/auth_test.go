package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/printpod/pod/internal/accounts"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
)

func TestAuthentication(t *testing.T) {
	d := startDemo(t)
	base := "http://" + d.app.Addr()
	ctx := context.Background()
	st := accounts.Store{Pool: d.app.Pool}
	_, revokedToken, err := st.Create(ctx, "revoked-co")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Revoke(ctx, revokedToken); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name   string
		header string
	}{
		{"missing header", ""},
		{"wrong scheme", "Basic ZGVtbzpkZW1v"},
		{"empty bearer", "Bearer "},
		{"unknown token", "Bearer not-a-token"},
		{"revoked token", "Bearer " + revokedToken},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/stores", "/v1/config/country-codes", "/v1/nowhere"} {
				req, _ := http.NewRequest(http.MethodGet, base+path, nil)
				if tc.header != "" {
					req.Header.Set("Authorization", tc.header)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 401 {
					t.Fatalf("%s: status %d, want 401", path, resp.StatusCode)
				}
				if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("%s: WWW-Authenticate = %q", path, resp.Header.Get("WWW-Authenticate"))
				}
			}
			c := testenv.NewClient(t, base, "")
			c.Token = strings.TrimPrefix(tc.header, "Bearer ")
			if !strings.HasPrefix(tc.header, "Bearer ") {
				c.Token = ""
			}
			r := c.Get("/v1/stores")
			if e := r.Err(t); r.Status != 401 || e.Error != "UNAUTHORIZED" {
				t.Fatalf("got %d %+v", r.Status, e)
			}
		})
	}

	t.Run("issued token works and revocation takes effect", func(t *testing.T) {
		token, err := st.Issue(ctx, d.app.DemoAccount)
		if err != nil {
			t.Fatal(err)
		}
		c := testenv.NewClient(t, base, token)
		if r := c.Get("/v1/stores"); r.Status != 200 {
			t.Fatalf("issued token: %d %s", r.Status, r.Body)
		}
		if r := c.Get("/v1/stores"); r.Status != 200 { // answered from the token cache now
			t.Fatalf("issued token, again: %d %s", r.Status, r.Body)
		}
		if err := st.Revoke(ctx, token); err != nil {
			t.Fatal(err)
		}
		// The revocation reaches the instance's token cache as an
		// announcement when it commits: within milliseconds, not the
		// cache's minute.
		testenv.Eventually(t, 2*time.Second, func() error {
			if r := c.Get("/v1/stores"); r.Status != 401 {
				return fmt.Errorf("revoked token: %d %s", r.Status, r.Body)
			}
			return nil
		})
	})

	t.Run("tokens are stored hashed", func(t *testing.T) {
		var n int
		if err := d.app.Pool.QueryRow(ctx, `SELECT count(*) FROM api_tokens WHERE token_hash = $1::bytea OR encode(token_hash, 'escape') LIKE '%' || $2 || '%'`,
			[]byte(d.cfg.DemoToken), d.cfg.DemoToken).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("a token is stored in plain text")
		}
		if _, err := st.Authenticate(ctx, d.cfg.DemoToken); err != nil {
			t.Fatalf("demo token does not authenticate: %v", err)
		}
	})
}

func TestErrorsHaveOneShape(t *testing.T) {
	d := startDemo(t)
	t.Run("unknown route", func(t *testing.T) {
		r := testenv.NewClient(t, "http://"+d.app.Addr(), d.cfg.DemoToken).Get("/v1/nowhere")
		if e := r.Err(t); r.Status != 404 || e.Error != "NOT_FOUND" {
			t.Fatalf("got %d %+v", r.Status, e)
		}
	})
	// A route has one spelling: another (a trailing slash, another case)
	// is no route, not the route under a name the Idempotency-Key digest
	// and the 405 gate would tell apart.
	for _, path := range []struct{ method, path string }{
		{"POST", "/v1/orders/pod/"}, {"GET", "/V1/stores"}, {"GET", "/v1/orders/pod/batches/"}, {"GET", "/v1/Stores"},
	} {
		t.Run("another spelling of a route: "+path.method+" "+path.path, func(t *testing.T) {
			r := testenv.NewClient(t, "http://"+d.app.Addr(), d.cfg.DemoToken).Do(path.method, path.path, map[string]any{})
			if e := r.Err(t); r.Status != 404 || e.Error != "NOT_FOUND" {
				t.Fatalf("got %d %+v", r.Status, e)
			}
		})
	}
	t.Run("body over 1 MiB", func(t *testing.T) {
		// The server answers as soon as it reads the declared length, and
		// closes the connection without reading the body.
		conn, err := net.Dial("tcp", d.app.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/stores HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{",
			d.cfg.DemoToken, 1<<20+1)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		r := testenv.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
		if e := r.Err(t); r.Status != 413 || e.Error != "PAYLOAD_TOO_LARGE" {
			t.Fatalf("got %d %+v", r.Status, e)
		}
	})
	t.Run("body of exactly 1 MiB is read", func(t *testing.T) {
		c := testenv.NewClient(t, "http://"+d.app.Addr(), d.cfg.DemoToken)
		body := []byte(`{"pad":"` + strings.Repeat("x", 1<<20-10) + `"}`)
		// read in full, then answered by the router: POST is not a method of /v1/stores
		r := c.Do(http.MethodPost, "/v1/stores", body)
		if e := r.Err(t); r.Status != 405 || e.Error != "METHOD_NOT_ALLOWED" {
			t.Fatalf("a body of %d bytes: %d %+v", len(body), r.Status, e)
		}
	})
	t.Run("method not allowed", func(t *testing.T) {
		c := testenv.NewClient(t, "http://"+d.app.Addr(), d.cfg.DemoToken)
		r := c.Do(http.MethodDelete, "/v1/stores", nil)
		if e := r.Err(t); r.Status != 405 || e.Error != "METHOD_NOT_ALLOWED" {
			t.Fatalf("got %d %+v", r.Status, e)
		}
	})
}

func TestRateLimit(t *testing.T) {
	d := startDemo(t)
	// Two more instances on the same database and Redis prefix with a tiny
	// limit: the budget lives in Redis, so requests to either spend it.
	cfg := d.cfg
	cfg.RateLimit, cfg.RateBurst = 1, 4
	cfg.DemoToken = ""
	cfg.Roles = []string{"api"}
	var clients []*testenv.Client
	for i := 0; i < 2; i++ {
		cfg.DataDir = t.TempDir()
		limited := podtest.Start(t, cfg)
		clients = append(clients, testenv.NewClient(t, "http://"+limited.Addr(), d.cfg.DemoToken))
	}

	var last testenv.Response
	served := 0
	for i := 0; i < 10; i++ {
		last = clients[i%2].Get("/v1/config/yarn-types")
		if last.Status == 429 {
			break
		}
		if last.Status != 200 {
			t.Fatalf("request %d: %d %s", i, last.Status, last.Body)
		}
		served++
		if last.Header.Get("RateLimit-Limit") != "4" || last.Header.Get("RateLimit-Remaining") == "" {
			t.Fatalf("missing RateLimit headers: %v", last.Header)
		}
	}
	if last.Status != 429 {
		t.Fatalf("10 quick requests with a burst of 4 were never limited")
	}
	// A burst of 4 at 1/s: each instance alone would have allowed 4, so more
	// than 5 served means the instances did not share the budget.
	if served > 5 {
		t.Fatalf("%d requests served across two instances with a shared burst of 4", served)
	}
	e := last.Err(t)
	if e.Error != "RATE_LIMITED" || last.Header.Get("Retry-After") == "" || last.Header.Get("RateLimit-Reset") == "" {
		t.Fatalf("429 without the expected code or headers: %+v %v", e, last.Header)
	}
	// Another token has its own budget.
	_, other := d.newAccount(t, "other-budget")
	if r := testenv.NewClient(t, clients[0].Base, other).Get("/v1/config/yarn-types"); r.Status != 200 {
		t.Fatalf("another token was limited too: %d", r.Status)
	}
}
