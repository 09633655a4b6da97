// Package rdb opens the Redis client. Redis holds counters and marks only
// (rate limits, duplicate hashes, failure streaks, the webhook sender's
// claims and done marks); the service degrades, never fails, when Redis is
// away.
package rdb

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

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

// CounterTimeout bounds a counter command (OpenCounters): past it the
// caller goes on as if Redis were away.
const CounterTimeout = 100 * time.Millisecond

// OpenCounters opens a second client on c's Redis for the API's
// per-request counters (rate limits, the soft duplicate claim) and returns
// it with its automatic pipeline, through which concurrent requests share
// round trips. Pipelined commands do not follow their caller's context, so
// the client's own timeouts bound them (CounterTimeout, no retry): a Redis
// that hangs lets requests through after that, as the counters' callers
// expect. Close the client when done.
func OpenCounters(c *redis.Client) (*redis.Client, *redis.AutoPipeliner, error) {
	opt := *c.Options()
	opt.ReadTimeout, opt.WriteTimeout, opt.MaxRetries = CounterTimeout, CounterTimeout, -1
	opt.AutoPipelineOptions = nil
	counters := redis.NewClient(&opt)
	ap, err := counters.AutoPipeline()
	if err != nil {
		counters.Close()
		return nil, nil, err
	}
	return counters, ap, nil
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

// deleteIfHolds deletes KEYS[1] while it holds ARGV[1].
var deleteIfHolds = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// DeleteIfHolds deletes key while it still holds value (a claim of the
// caller's, not one another took since its own ran out), and says whether
// it did.
func DeleteIfHolds(ctx context.Context, c redis.Scripter, key, value string) (bool, error) {
	n, err := deleteIfHolds.Run(ctx, c, []string{key}, value).Int()
	return n == 1, err
}

// setIfHolds sets KEYS[1] to ARGV[2] for ARGV[3] ms while it holds ARGV[1]
// or nothing.
var setIfHolds = redis.NewScript(`local v = redis.call("GET", KEYS[1])
if v == false or v == ARGV[1] then redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3]) return 1 end
return 0`)

// SetIfHolds sets key to value for ttl while key still holds old, or
// nothing (old ran out and nobody took the key since), and says whether
// it did.
func SetIfHolds(ctx context.Context, c redis.Scripter, key, old, value string, ttl time.Duration) (bool, error) {
	n, err := setIfHolds.Run(ctx, c, []string{key}, old, value, ttl.Milliseconds()).Int()
	return n == 1, err
}
