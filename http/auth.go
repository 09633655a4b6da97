package http

import (
	"context"
	"errors"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/printpod/pod/internal/accounts"
	"github.com/printpod/pod/schemas"
)

// Authenticator resolves a bearer token to its account.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (uuid.UUID, error)
}

const (
	localAccount = "account"
	localToken   = "token_hash"
)

func unauthorized(msg string) *Error {
	return &Error{Status: fiber.StatusUnauthorized, Code: schemas.CodeUnauthorized, Message: msg}
}

// requireToken rejects requests without a valid bearer token and stores the
// token's account for the handlers.
func requireToken(auth Authenticator) fiber.Handler {
	return func(c *fiber.Ctx) error {
		h := c.Get(fiber.HeaderAuthorization)
		if h == "" {
			return unauthorized("missing Authorization header; send Authorization: Bearer <token>")
		}
		scheme, token, ok := strings.Cut(h, " ")
		token = strings.TrimSpace(token)
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			return unauthorized("malformed Authorization header; send Authorization: Bearer <token>")
		}
		account, err := auth.Authenticate(c.UserContext(), token)
		if errors.Is(err, accounts.ErrNoToken) {
			return unauthorized("invalid or revoked token")
		}
		if err != nil {
			return err
		}
		c.Locals(localAccount, account)
		c.Locals(localToken, string(accounts.Hash(token)))
		return c.Next()
	}
}

// accountOf is the authenticated account of the request.
func accountOf(c *fiber.Ctx) uuid.UUID {
	id, _ := c.Locals(localAccount).(uuid.UUID)
	return id
}

// pathUUID parses a path parameter that must be a UUID.
func pathUUID(c *fiber.Ctx, name string) (uuid.UUID, error) {
	id, err := uuid.Parse(c.Params(name))
	if err != nil {
		return uuid.Nil, Validation(name, name+" must be a UUID")
	}
	return id, nil
}
