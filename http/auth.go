package http

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/redis/go-redis/v9"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/printpod/pod/internal/accounts"
	"github.com/printpod/pod/internal/uuidtext"
	"github.com/printpod/pod/schemas"
)

// Authenticator resolves a bearer token to its account.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (uuid.UUID, error)
}

const (
	localAccount = "account"
	localToken   = "token_hash"
	localSeed    = "command_seed"
	localSent    = "command_sent"
	localRepeat  = "command_repeat"
)

func unauthorized(msg string) *Error {
	return &Error{Code: schemas.CodeUnauthorized, Message: msg}
}

// badTokens remembers token hashes that named no active token, so a bad
// token seen again costs a map lookup, not a Postgres query. Tokens are
// random, so no token is issued after it was seen as bad; a revoked token
// never comes back.
type badTokens = expirable.LRU[string, struct{}]

func newBadTokens() *badTokens {
	return expirable.NewLRU[string, struct{}](16384, nil, 10*time.Minute)
}

// requireToken rejects requests without a valid bearer token and stores the
// token's account for the handlers.
//
// Failed authentication is limited per client address: past the budget a
// bad token answers 429 instead of 401, so guessing tokens is slow.
func requireToken(auth Authenticator, rdb redis.Cmdable, cfg RateLimit, log *slog.Logger) fiber.Handler {
	authFailLimit := redis_rate.Limit{Rate: max(1, cfg.AuthFailRate), Burst: max(1, cfg.AuthFailBurst), Period: time.Second}
	prefix := cfg.Prefix
	bad := newBadTokens()
	var limiter *redis_rate.Limiter
	if rdb != nil {
		limiter = redis_rate.NewLimiter(rdb)
	}
	refuse := func(c *fiber.Ctx, msg string) error {
		if limiter != nil {
			// The failure budget is spent only by failures; past 100ms
			// without Redis the 401 is answered as it is.
			ctx, cancel := context.WithTimeout(c.UserContext(), 100*time.Millisecond)
			res, err := limiter.Allow(ctx, prefix+"authfail:"+c.IP(), authFailLimit)
			cancel()
			if err == nil && res.Allowed == 0 {
				return &Error{Code: schemas.CodeRateLimited, RetryAfter: max(1, int(math.Ceil(res.RetryAfter.Seconds()))),
					Message: "too many failed authentications from this address; retry after the number of seconds in Retry-After"}
			}
			if err != nil {
				log.DebugContext(ctx, "failed-authentication limit unavailable", "err", err)
			}
		}
		return unauthorized(msg)
	}
	return func(c *fiber.Ctx) error {
		h := c.Get(fiber.HeaderAuthorization)
		if h == "" {
			return refuse(c, "missing Authorization header; send Authorization: Bearer <token>")
		}
		scheme, token, ok := strings.Cut(h, " ")
		token = strings.TrimSpace(token)
		if !ok || !strings.EqualFold(scheme, "Bearer") || !printableToken(token) {
			return refuse(c, "malformed Authorization header; send Authorization: Bearer <token>")
		}
		hash := string(accounts.Hash(token))
		if bad.Contains(hash) {
			return refuse(c, "invalid or revoked token")
		}
		account, err := auth.Authenticate(c.UserContext(), token)
		if errors.Is(err, accounts.ErrNoToken) {
			bad.Add(hash, struct{}{})
			return refuse(c, "invalid or revoked token")
		}
		if err != nil {
			return err
		}
		c.Locals(localAccount, account)
		c.Locals(localToken, hash)
		return c.Next()
	}
}

// printableToken reports whether a bearer token is 1..512 visible ASCII
// characters: anything else cannot be a token we issued.
func printableToken(t string) bool {
	if t == "" || len(t) > 512 {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return false
		}
	}
	return true
}

// accountOf is the authenticated account of the request.
func accountOf(c *fiber.Ctx) uuid.UUID {
	id, _ := c.Locals(localAccount).(uuid.UUID)
	return id
}

// pathUUID parses a path parameter that must be a UUID in its canonical
// form (uuidtext.Parse): /v1/orders/pod/urn:uuid:… is malformed.
func pathUUID(c *fiber.Ctx, name string) (uuid.UUID, error) {
	id, err := uuidtext.Parse(c.Params(name))
	if err != nil {
		return uuid.Nil, Validation(name, name+" must be a UUID")
	}
	return id, nil
}
