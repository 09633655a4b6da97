// Package testenv gives tests real parts: a fresh Postgres database per test,
// the machine's Redis, an HTTP client for the API and the poll-until helper
// tests use instead of sleeps. internal/podtest starts podsvc itself.
//
// Postgres and Redis are the machine's (see deploy/local/services.sh);
// TEST_PG_ADMIN_URL and TEST_REDIS_URL override where they are.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/loopback"
	"github.com/redis/go-redis/v9"
)

// AdminURL is the Postgres URL used to create and drop test databases.
func AdminURL() string {
	if u := os.Getenv("TEST_PG_ADMIN_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// RedisURL is the Redis the tests use.
func RedisURL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// NewRedis is a client of the tests' Redis, closed when the test ends.
func NewRedis(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// RandomSuffix is 12 random hex characters for unique names.
func RandomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewDatabase creates an empty database for the test and drops it when the
// test ends. It fails the test (never skips) when Postgres is away.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := AdminURL()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("Postgres is required for this test (run `make test`, which starts it): %v", err)
	}
	defer conn.Close(ctx)
	name := "pod_test_" + RandomSuffix()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("drop test database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("TEST_PG_ADMIN_URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// Eventually polls cond every 20ms until it returns nil or timeout passes,
// then fails the test with cond's last error.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("condition not met within %s: %v", timeout, err)
	}
}

// Poll calls cond every 20ms until it returns nil (Poll returns nil) or
// timeout passes (Poll returns cond's last error). It is the one waiting
// loop of the tests; callers that must not stop the test on a timeout use
// it instead of Eventually.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Errorf is fmt.Errorf, for conditions passed to Eventually.
var Errorf = fmt.Errorf

// FreeAddr is a loopback address with a port nothing listens on now, and
// which no outgoing connection will take meanwhile (loopback.FreeAddr), for
// a listener another process or a later step opens.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := loopback.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
