// Package config loads and validates the podsvc settings. Names and defaults
// follow the runtime contract (shared spec runtime.md); settings beyond it are
// prefixed POD_ and documented in the README.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/printpod/pod/internal/secretbox"
	"github.com/printpod/pod/schemas"
)

// Roles a podsvc process can run.
const (
	RoleAPI       = "api"
	RoleDecider   = "decider"
	RoleProjector = "projector"
	RolePusher    = "pusher"
	RoleDelivery  = "delivery"
)

// AllRoles is what POD_ROLES=all means.
var AllRoles = []string{RoleAPI, RoleDecider, RoleProjector, RolePusher, RoleDelivery}

// Config is the whole podsvc configuration.
type Config struct {
	Env                 string          // POD_ENV: development or production
	HTTPAddr            string          // POD_HTTP_ADDR
	PprofAddr           string          // POD_PPROF_ADDR: where /debug/pprof listens; empty = off
	DatabaseURL         string          // DATABASE_URL
	RedisURL            string          // REDIS_URL
	RedisPrefix         string          // POD_REDIS_PREFIX: prefix of every Redis key
	KafkaBrokers        []string        // KAFKA_BROKERS; empty = embedded broker
	KafkaPartitions     int             // POD_KAFKA_PARTITIONS: partitions of each topic created
	KafkaTopicPrefix    string          // POD_KAFKA_TOPIC_PREFIX: prefix of every topic name; empty = none
	KafkaGroupPrefix    string          // POD_KAFKA_GROUP_PREFIX: prefix of every consumer group id; empty = none
	KafkaReplication    int             // POD_KAFKA_REPLICATION: replicas of each topic created; 0 = min(3, brokers)
	KafkaRetention      time.Duration   // POD_KAFKA_RETENTION: retention of command and event topics (real Kafka only)
	KafkaDLQRetention   time.Duration   // POD_KAFKA_DLQ_RETENTION: retention of dead-letter topics (real Kafka only)
	KafkaSessionTimeout time.Duration   // POD_KAFKA_SESSION_TIMEOUT: how long a silent group member keeps its partitions
	EmbeddedKafkaPort   int             // POD_KAFKA_EMBEDDED_PORT: 0 picks a free port
	DataDir             string          // POD_DATA_DIR
	Roles               []string        // POD_ROLES
	DemoToken           string          // POD_DEMO_TOKEN
	WebhookRetryDelays  []time.Duration // POD_WEBHOOK_RETRY_DELAYS: waits before attempts 2..7
	WebhookTimeout      time.Duration   // POD_WEBHOOK_TIMEOUT
	WebhookAllowTargets []string        // POD_WEBHOOK_ALLOW_TARGETS
	WebhookSecretKey    string          // POD_WEBHOOK_SECRET_KEY: base64 32-byte keys, comma-separated; the first seals
	WebhookConcurrency  int             // POD_WEBHOOK_CONCURRENCY: delivery requests in flight per process
	WebhookPerEndpoint  int             // POD_WEBHOOK_ENDPOINT_CONCURRENCY: delivery requests in flight per webhook
	DeliveryRetention   time.Duration   // POD_DELIVERY_RETENTION: how long delivery logs are kept
	PushRetryDelays     []time.Duration // POD_PUSH_RETRY_DELAYS
	PlatformURL         string          // POD_PLATFORM_URL; empty in development = simulator
	RateLimit           int             // POD_RATE_LIMIT: requests per second per token
	RateBurst           int             // POD_RATE_BURST: burst per token
	AuthFailRate        int             // POD_AUTH_FAIL_RATE: failed authentications per second per client address
	AuthFailBurst       int             // POD_AUTH_FAIL_BURST: burst of failed authentications per client address
	LogLevel            string          // POD_LOG_LEVEL: debug, info, warn, error
	ShutdownTimeout     time.Duration   // POD_SHUTDOWN_TIMEOUT
	MetricsRefresh      time.Duration   // POD_METRICS_REFRESH: how often consumer lag and order counts are read; 0 = never
}

// Defaults returns the configuration used when nothing is set.
func Defaults() Config {
	return Config{
		Env:               "development",
		HTTPAddr:          "127.0.0.1:8080",
		DatabaseURL:       "postgres://postgres@127.0.0.1:5432/pod?sslmode=disable",
		RedisURL:          "redis://127.0.0.1:6379/0",
		RedisPrefix:       "pod:",
		KafkaPartitions:   6,
		KafkaRetention:    7 * 24 * time.Hour,
		KafkaDLQRetention: 30 * 24 * time.Hour,
		// A killed process's partitions wait this long for a new owner:
		// Kafka clients' 45 s default would hold its orders' decisions past
		// the API's wait. The brokers bound it (group.min.session.timeout.ms,
		// 6 s by default).
		KafkaSessionTimeout: 10 * time.Second,
		DataDir:             "./var",
		Roles:               slices.Clone(AllRoles),
		DemoToken:           "demo-token",
		WebhookRetryDelays:  []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour},
		WebhookTimeout:      10 * time.Second,
		WebhookConcurrency:  256,
		WebhookPerEndpoint:  8,
		DeliveryRetention:   30 * 24 * time.Hour,
		PushRetryDelays:     []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute},
		RateLimit:           5000,
		RateBurst:           10000,
		AuthFailRate:        10,
		AuthFailBurst:       100,
		LogLevel:            "info",
		ShutdownTimeout:     20 * time.Second,
		MetricsRefresh:      5 * time.Second,
	}
}

// Production reports whether the strict production rules apply.
func (c Config) Production() bool { return c.Env == "production" }

// Embedded reports whether the in-process Kafka broker is used.
func (c Config) Embedded() bool { return len(c.KafkaBrokers) == 0 }

// HasRole reports whether the process runs role r.
func (c Config) HasRole(r string) bool { return slices.Contains(c.Roles, r) }

// KafkaAddrFile is where the embedded broker's address is written for podctl.
func (c Config) KafkaAddrFile() string { return filepath.Join(c.DataDir, "kafka.addr") }

// KafkaDataDir is the embedded broker's storage.
func (c Config) KafkaDataDir() string { return filepath.Join(c.DataDir, "kafka") }

// FromEnv starts from Defaults and applies every set variable of getenv
// (os.Getenv when nil). Parse problems are returned joined; Validate is
// called too.
func FromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Defaults()
	var errs []error
	str := func(name string, dst *string) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			*dst = v
		}
	}
	num := func(name string, dst *int) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not a whole number", name, v))
				return
			}
			*dst = n
		}
	}
	dur := func(name string, dst *time.Duration) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not a duration (e.g. 10s)", name, v))
				return
			}
			*dst = d
		}
	}
	durs := func(name string, dst *[]time.Duration) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			var out []time.Duration
			for _, part := range splitList(v) {
				d, err := time.ParseDuration(part)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %q is not a duration (e.g. 1m)", name, part))
					return
				}
				out = append(out, d)
			}
			*dst = out
		}
	}
	list := func(name string, dst *[]string) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			*dst = splitList(v)
		}
	}

	str("POD_ENV", &c.Env)
	str("POD_HTTP_ADDR", &c.HTTPAddr)
	str("POD_PPROF_ADDR", &c.PprofAddr)
	str("DATABASE_URL", &c.DatabaseURL)
	str("REDIS_URL", &c.RedisURL)
	str("POD_REDIS_PREFIX", &c.RedisPrefix)
	list("KAFKA_BROKERS", &c.KafkaBrokers)
	num("POD_KAFKA_PARTITIONS", &c.KafkaPartitions)
	num("POD_KAFKA_EMBEDDED_PORT", &c.EmbeddedKafkaPort)
	str("POD_KAFKA_TOPIC_PREFIX", &c.KafkaTopicPrefix)
	str("POD_KAFKA_GROUP_PREFIX", &c.KafkaGroupPrefix)
	num("POD_KAFKA_REPLICATION", &c.KafkaReplication)
	dur("POD_KAFKA_RETENTION", &c.KafkaRetention)
	dur("POD_KAFKA_DLQ_RETENTION", &c.KafkaDLQRetention)
	dur("POD_KAFKA_SESSION_TIMEOUT", &c.KafkaSessionTimeout)
	str("POD_DATA_DIR", &c.DataDir)
	if v := strings.TrimSpace(getenv("POD_ROLES")); v != "" && v != "all" {
		c.Roles = splitList(v)
	}
	str("POD_DEMO_TOKEN", &c.DemoToken)
	durs("POD_WEBHOOK_RETRY_DELAYS", &c.WebhookRetryDelays)
	dur("POD_WEBHOOK_TIMEOUT", &c.WebhookTimeout)
	list("POD_WEBHOOK_ALLOW_TARGETS", &c.WebhookAllowTargets)
	str("POD_WEBHOOK_SECRET_KEY", &c.WebhookSecretKey)
	num("POD_WEBHOOK_CONCURRENCY", &c.WebhookConcurrency)
	num("POD_WEBHOOK_ENDPOINT_CONCURRENCY", &c.WebhookPerEndpoint)
	dur("POD_DELIVERY_RETENTION", &c.DeliveryRetention)
	durs("POD_PUSH_RETRY_DELAYS", &c.PushRetryDelays)
	str("POD_PLATFORM_URL", &c.PlatformURL)
	num("POD_RATE_LIMIT", &c.RateLimit)
	num("POD_RATE_BURST", &c.RateBurst)
	num("POD_AUTH_FAIL_RATE", &c.AuthFailRate)
	num("POD_AUTH_FAIL_BURST", &c.AuthFailBurst)
	str("POD_LOG_LEVEL", &c.LogLevel)
	dur("POD_SHUTDOWN_TIMEOUT", &c.ShutdownTimeout)
	dur("POD_METRICS_REFRESH", &c.MetricsRefresh)

	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// Validate reports every problem of c, joined.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if c.Env != "development" && c.Env != "production" {
		bad("POD_ENV: %q must be development or production", c.Env)
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		bad("POD_HTTP_ADDR: %q is not host:port", c.HTTPAddr)
	}
	if _, _, err := net.SplitHostPort(c.PprofAddr); c.PprofAddr != "" && err != nil {
		bad("POD_PPROF_ADDR: %q is not host:port", c.PprofAddr)
	}
	if c.DatabaseURL == "" {
		bad("DATABASE_URL: empty")
	}
	if c.RedisURL == "" {
		bad("REDIS_URL: empty")
	}
	if c.KafkaPartitions < 1 || c.KafkaPartitions > 1024 {
		bad("POD_KAFKA_PARTITIONS: %d must be between 1 and 1024", c.KafkaPartitions)
	}
	checkName := func(name, prefix string) {
		if len(prefix) > maxKafkaPrefix {
			bad("%s: %q is longer than %d characters", name, prefix, maxKafkaPrefix)
		}
		if strings.Trim(prefix, kafkaNameChars) != "" {
			bad("%s: %q may hold only letters, digits, '.', '_' and '-'", name, prefix)
		}
	}
	checkName("POD_KAFKA_TOPIC_PREFIX", c.KafkaTopicPrefix)
	checkName("POD_KAFKA_GROUP_PREFIX", c.KafkaGroupPrefix)
	if c.KafkaReplication < 0 || c.KafkaReplication > 32 {
		bad("POD_KAFKA_REPLICATION: %d must be between 1 and 32, or 0 for min(3, brokers)", c.KafkaReplication)
	}
	if c.Embedded() && c.KafkaReplication > 1 {
		bad("POD_KAFKA_REPLICATION: %d needs KAFKA_BROKERS (the embedded broker is a single node)", c.KafkaReplication)
	}
	if c.KafkaRetention <= 0 {
		bad("POD_KAFKA_RETENTION: %s must be positive", c.KafkaRetention)
	}
	if c.KafkaDLQRetention <= 0 {
		bad("POD_KAFKA_DLQ_RETENTION: %s must be positive", c.KafkaDLQRetention)
	}
	if c.KafkaSessionTimeout < time.Second || c.KafkaSessionTimeout > 30*time.Minute {
		bad("POD_KAFKA_SESSION_TIMEOUT: %s must be between 1s and 30m (and within the brokers' group.min/max.session.timeout.ms)", c.KafkaSessionTimeout)
	}
	if c.EmbeddedKafkaPort < 0 || c.EmbeddedKafkaPort > 65535 {
		bad("POD_KAFKA_EMBEDDED_PORT: %d is not a port", c.EmbeddedKafkaPort)
	}
	if c.DataDir == "" {
		bad("POD_DATA_DIR: empty")
	}
	if len(c.Roles) == 0 {
		bad("POD_ROLES: no role")
	}
	for _, r := range c.Roles {
		if !slices.Contains(AllRoles, r) {
			bad("POD_ROLES: unknown role %q (known: all, %s)", r, strings.Join(AllRoles, ", "))
		}
	}
	if len(c.WebhookRetryDelays) != 6 {
		bad("POD_WEBHOOK_RETRY_DELAYS: %d delays given, 6 needed (waits before attempts 2..7)", len(c.WebhookRetryDelays))
	}
	checkPositive := func(name string, ds []time.Duration) {
		for _, d := range ds {
			if d <= 0 {
				bad("%s: %s must be positive", name, d)
			}
		}
	}
	checkPositive("POD_WEBHOOK_RETRY_DELAYS", c.WebhookRetryDelays)
	if c.WebhookTimeout <= 0 {
		bad("POD_WEBHOOK_TIMEOUT: %s must be positive", c.WebhookTimeout)
	}
	if len(c.PushRetryDelays) != 3 {
		bad("POD_PUSH_RETRY_DELAYS: %d delays given, 3 needed", len(c.PushRetryDelays))
	}
	checkPositive("POD_PUSH_RETRY_DELAYS", c.PushRetryDelays)
	for _, t := range c.WebhookAllowTargets {
		if _, _, err := net.SplitHostPort(t); err != nil {
			bad("POD_WEBHOOK_ALLOW_TARGETS: %q is not host:port", t)
		}
	}
	if c.WebhookSecretKey != "" {
		if _, err := secretbox.ParseKeys(c.WebhookSecretKey); err != nil {
			bad("POD_WEBHOOK_SECRET_KEY: %v", err)
		}
	}
	if c.WebhookConcurrency < 1 || c.WebhookPerEndpoint < 1 {
		bad("POD_WEBHOOK_CONCURRENCY and POD_WEBHOOK_ENDPOINT_CONCURRENCY must be at least 1")
	}
	if c.DeliveryRetention <= 0 {
		bad("POD_DELIVERY_RETENTION: %s must be positive", c.DeliveryRetention)
	}
	if c.Production() {
		if c.WebhookSecretKey == "" {
			bad("POD_WEBHOOK_SECRET_KEY: required in production (base64 of 32 random bytes, e.g. openssl rand -base64 32)")
		}
		if len(c.WebhookAllowTargets) > 0 {
			bad("POD_WEBHOOK_ALLOW_TARGETS: not allowed in production")
		}
		if c.PlatformURL == "" {
			bad("POD_PLATFORM_URL: required in production (the simulator runs only in development)")
		}
	}
	if c.RateLimit < 1 {
		bad("POD_RATE_LIMIT: %d must be at least 1", c.RateLimit)
	}
	if c.RateBurst < 1 {
		bad("POD_RATE_BURST: %d must be at least 1", c.RateBurst)
	}
	if c.AuthFailRate < 1 {
		bad("POD_AUTH_FAIL_RATE: %d must be at least 1", c.AuthFailRate)
	}
	if c.AuthFailBurst < 1 {
		bad("POD_AUTH_FAIL_BURST: %d must be at least 1", c.AuthFailBurst)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("POD_LOG_LEVEL: %q must be debug, info, warn or error", c.LogLevel)
	}
	if c.MetricsRefresh < 0 {
		bad("POD_METRICS_REFRESH: %s must not be negative", c.MetricsRefresh)
	}
	if c.ShutdownTimeout <= 0 {
		bad("POD_SHUTDOWN_TIMEOUT: %s must be positive", c.ShutdownTimeout)
	}
	return errors.Join(errs...)
}

// kafkaNameChars are the characters Kafka allows in topic names; prefixes
// keep to them (group ids too, so a group reads like its topics).
const kafkaNameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

// maxKafkaPrefix keeps the longest prefixed topic name
// (pod.dlq.<consumer>, pod.webhook.deliveries.retry.12h: under 40
// characters) well within Kafka's 249.
const maxKafkaPrefix = 100

// Naming is how topics and consumer groups are named on the cluster.
func (c Config) Naming() schemas.Naming {
	return schemas.Naming{TopicPrefix: c.KafkaTopicPrefix, GroupPrefix: c.KafkaGroupPrefix}
}

// RetryTierRetention is the retention of the delivery retry tier topics:
// POD_KAFKA_RETENTION plus the longest retry wait, so a task waiting out
// its tier is never deleted before it is due, and a tier keeps at least as
// much history as the other topics.
func (c Config) RetryTierRetention() time.Duration {
	return c.KafkaRetention + slices.Max(append([]time.Duration{0}, c.WebhookRetryDelays...))
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// SecretBox is the box sealing webhook secrets: the configured keys, or
// outside production without any, a fixed development key.
func (c Config) SecretBox() (*secretbox.Box, error) {
	if c.WebhookSecretKey == "" {
		if c.Production() {
			return nil, errors.New("POD_WEBHOOK_SECRET_KEY: required in production")
		}
		return secretbox.New(secretbox.DevelopmentKey())
	}
	keys, err := secretbox.ParseKeys(c.WebhookSecretKey)
	if err != nil {
		return nil, fmt.Errorf("POD_WEBHOOK_SECRET_KEY: %w", err)
	}
	return secretbox.New(keys...)
}
