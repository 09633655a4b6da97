package http

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/printpod/pod/internal/accounts"
	"github.com/printpod/pod/internal/testenv"
)

// tokensOf is an Authenticator of one active token, of which known says
// whether the instance holds it in memory, counting the lookups made.
type tokensOf struct {
	token   string
	account uuid.UUID
	known   bool
	lookups atomic.Int32
}

func (a *tokensOf) Authenticate(_ context.Context, token string) (uuid.UUID, error) {
	a.lookups.Add(1)
	if token == a.token {
		return a.account, nil
	}
	return uuid.Nil, accounts.ErrNoToken
}

func (a *tokensOf) Known(token string) (uuid.UUID, bool) {
	return a.account, a.known && token == a.token
}

// TestAnAddressPastItsFailureBudgetCostsNoLookup: once an address has
// spent its budget of failed authentications, its requests are answered
// 429 at once, new tokens looked up neither in Postgres nor in Redis,
// until the budget allows one again; a token the instance knows active
// still passes, and one it would have to look up waits like the rest.
func TestAnAddressPastItsFailureBudgetCostsNoLookup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		known  bool
		status int
	}{
		{"a token the instance knows active passes", true, 200},
		{"a token it would have to look up is refused like a guess", false, 429},
	} {
		t.Run(tc.name, func(t *testing.T) {
			auth := &tokensOf{token: "good-" + uuid.NewString(), account: uuid.New(), known: tc.known}
			cfg := RateLimit{AuthFailRate: 1, AuthFailBurst: 3, Prefix: "podtest:" + testenv.RandomSuffix() + ":"}
			app := fiber.New(fiber.Config{ErrorHandler: errorHandler(slog.New(slog.DiscardHandler), &methodTable{})})
			app.Use(requireToken(auth, testenv.NewRedis(t), cfg, slog.New(slog.DiscardHandler)))
			app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(200) })
			get := func(token string) int {
				t.Helper()
				req := httptest.NewRequest("GET", "/", nil)
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := app.Test(req, -1)
				if err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode
			}
			for i := 0; ; i++ {
				status := get(uuid.NewString())
				if status == 429 {
					break
				}
				if status != 401 || i > 10 {
					t.Fatalf("guess %d: %d, want 401 until the budget of 3 is spent, then 429", i, status)
				}
			}
			looked := auth.lookups.Load()
			for range 20 {
				if status := get(uuid.NewString()); status != 429 {
					t.Fatalf("a guess past the budget: %d, want 429", status)
				}
			}
			if n := auth.lookups.Load() - looked; n != 0 {
				t.Fatalf("%d guesses past the budget were looked up", n)
			}
			if status := get(auth.token); status != tc.status {
				t.Fatalf("the active token: %d, want %d", status, tc.status)
			}
		})
	}
}
