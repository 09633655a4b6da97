// Package podtest starts podsvc in-process for tests, on a fresh database, a
// free port, a unique Redis prefix and the embedded Kafka-protocol broker in
// a temporary data directory.
package podtest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/printpod/pod/cmd/podsvc/app"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/logging"
	"github.com/printpod/pod/internal/testenv"
)

// RealKafkaEnv names the brokers of a real Kafka cluster to run the tests
// on instead of the embedded broker (`make test` sets it for its second
// pass, from deploy/local/kafka.sh).
const RealKafkaEnv = "POD_TEST_KAFKA_BROKERS"

// RealKafka is the cluster of RealKafkaEnv, or nil: the embedded broker.
func RealKafka() []string {
	var out []string
	for _, b := range strings.Split(os.Getenv(RealKafkaEnv), ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Config is a development configuration on a fresh database, a free HTTP
// port, the embedded broker in a temporary directory (or the real cluster
// of RealKafkaEnv, under a topic and group prefix of the test's own) and a
// unique Redis prefix. Tests adjust it before Start.
func Config(t testing.TB) config.Config {
	t.Helper()
	cfg := config.Defaults()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.DatabaseURL = testenv.NewDatabase(t)
	cfg.RedisURL = testenv.RedisURL()
	cfg.RedisPrefix = "podtest:" + testenv.RandomSuffix() + ":"
	cfg.DataDir = t.TempDir()
	cfg.KafkaPartitions = 3
	if brokers := RealKafka(); brokers != nil {
		prefix := "t" + testenv.RandomSuffix() + "."
		cfg.KafkaBrokers, cfg.KafkaTopicPrefix, cfg.KafkaGroupPrefix = brokers, prefix, prefix
		// Registered before Start's, so it runs once podsvc stopped.
		t.Cleanup(func() { DropPrefixed(t, brokers, prefix) })
	}
	// Contract and auth tests send hundreds of bad tokens from one address
	// on purpose; the hostile suite still reaches the limit.
	cfg.AuthFailBurst = 500
	cfg.ShutdownTimeout = 10 * time.Second
	cfg.LogLevel = "warn"
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	cfg.WebhookSecretKey = base64.StdEncoding.EncodeToString(key)
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

// DropPrefixed deletes the topics and consumer groups whose names start
// with prefix on the cluster at brokers, so a shared cluster keeps nothing
// of a test. Failures are logged, not fatal.
func DropPrefixed(t testing.TB, brokers []string, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := kafka.DropPrefixed(ctx, brokers, prefix); err != nil {
		t.Logf("clean up %s: %v", prefix, err)
	}
}
