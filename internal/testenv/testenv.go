// Package testenv starts real parts for tests: a fresh Postgres database per
// test, a Redis key prefix per test, and podsvc in-process with its embedded
// Kafka-protocol broker in a temporary data directory. It also has the HTTP
// client helpers and the poll-until helper tests use instead of sleeps.
//
// Postgres and Redis are the machine's (see deploy/local/services.sh);
// TEST_PG_ADMIN_URL and TEST_REDIS_URL override where they are.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/app"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/logging"
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

func randomSuffix() string {
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
	name := "pod_test_" + randomSuffix()
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

// Config is a development configuration on a fresh database, a free HTTP
// port, the embedded broker in a temporary directory and a unique Redis
// prefix. Tests adjust it before Start.
func Config(t testing.TB) config.Config {
	t.Helper()
	cfg := config.Defaults()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.DatabaseURL = NewDatabase(t)
	cfg.RedisURL = RedisURL()
	cfg.RedisPrefix = "podtest:" + randomSuffix() + ":"
	cfg.DataDir = t.TempDir()
	cfg.KafkaPartitions = 3
	cfg.ShutdownTimeout = 10 * time.Second
	cfg.LogLevel = "warn"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	return cfg
}

// Logger writes JSON logs at level to the test log when -v is set, and
// discards them otherwise.
func Logger(t testing.TB, level string) *slog.Logger {
	if testing.Verbose() {
		return logging.New(os.Stderr, level)
	}
	return slog.New(slog.DiscardHandler)
}

// Start runs podsvc in-process and stops it when the test ends (Stop may be
// called earlier; it is idempotent).
func Start(t testing.TB, cfg config.Config) *app.App {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := app.Start(ctx, cfg, Logger(t, cfg.LogLevel))
	if err != nil {
		t.Fatalf("start podsvc: %v", err)
	}
	t.Cleanup(a.Stop)
	return a
}

// Eventually polls cond every 20ms until it returns nil or timeout passes,
// then fails the test with cond's last error.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Errorf is fmt.Errorf, for conditions passed to Eventually.
var Errorf = fmt.Errorf
