// Package rdb opens the Redis client. Redis holds counters only (rate limits,
// duplicate hashes, failure streaks); the service degrades, never fails, when
// Redis is away.
package rdb

import (
	"context"
	"fmt"

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
