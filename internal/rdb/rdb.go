// Package rdb opens the Redis client. Redis holds counters only (rate limits,
// duplicate hashes, failure streaks); the service degrades, never fails, when
// Redis is away.
package rdb

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Open parses url and returns a client. It does not require Redis to answer:
// readiness reports that separately.
func Open(ctx context.Context, url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parse REDIS_URL: %w", err)
	}
	opt.MaxRetries = 1
	return redis.NewClient(opt), nil
}

// UseLogger sends the Redis client's own messages (dial failures and the
// like, plain text on stderr by default) to log as JSON warnings. The Redis
// client has one logger per process, so the last call wins.
func UseLogger(log *slog.Logger) {
	redis.SetLogger(slogPrintf{log.With("component", "redis")})
}

type slogPrintf struct{ log *slog.Logger }

func (l slogPrintf) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}
