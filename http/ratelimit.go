package http

import (
	"context"
	"encoding/hex"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/gofiber/fiber/v2"
	"github.com/printpod/pod/schemas"
	"github.com/redis/go-redis/v9"
)

// RateLimit configures the per-token limit (a GCRA in Redis, shared by every
// instance): Rate requests per second with bursts up to Burst.
type RateLimit struct {
	Rate   int
	Burst  int
	Prefix string // Redis key prefix
	// AuthFailRate and AuthFailBurst limit failed authentications per
	// client address (per second, burst); past them a bad token is 429.
	AuthFailRate, AuthFailBurst int
}

// rateLimit answers 429 RATE_LIMITED when the token's budget is spent. When
// Redis does not answer, requests pass (the limit degrades, the API does not).
func rateLimit(rdb redis.Cmdable, cfg RateLimit, log *slog.Logger) fiber.Handler {
	limiter := redis_rate.NewLimiter(rdb)
	limit := redis_rate.Limit{Rate: cfg.Rate, Burst: cfg.Burst, Period: time.Second}
	var lastWarn atomic.Int64 // unix nanos of the last warning
	return func(c *fiber.Ctx) error {
		tok, _ := c.Locals(localToken).(string)
		key := cfg.Prefix + "rl:" + hex.EncodeToString([]byte(tok)[:12])
		// A Redis that hangs must not hold requests: past 100ms the request
		// passes as if Redis were down.
		ctx, cancel := context.WithTimeout(c.UserContext(), 100*time.Millisecond)
		res, err := limiter.Allow(ctx, key, limit)
		cancel()
		if err != nil {
			if now := time.Now().UnixNano(); now-lastWarn.Load() > int64(10*time.Second) {
				lastWarn.Store(now)
				log.WarnContext(ctx, "rate limit unavailable; letting requests through", "err", err)
			}
			return c.Next()
		}
		reset := int(math.Ceil(res.ResetAfter.Seconds()))
		c.Set("RateLimit-Limit", strconv.Itoa(cfg.Burst))
		c.Set("RateLimit-Remaining", strconv.Itoa(res.Remaining))
		c.Set("RateLimit-Reset", strconv.Itoa(reset))
		if res.Allowed == 0 {
			retry := int(math.Ceil(res.RetryAfter.Seconds()))
			if retry < 1 {
				retry = 1
			}
			return &Error{Code: schemas.CodeRateLimited,
				Message: "rate limit exceeded; retry after the number of seconds in Retry-After", RetryAfter: retry}
		}
		return c.Next()
	}
}
