// Package accounts manages client accounts and their API tokens. Tokens are
// stored only as SHA-256 digests; the plain token exists once, in the output
// of podctl (or as the configured demo token).
package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/cache"
	"github.com/printpod/pod/internal/pgnotify"
)

// Sentinel errors.
var (
	// ErrNameTaken means an account with that name exists.
	ErrNameTaken = errors.New("account name already taken")
	// ErrNoAccount means the account id is unknown.
	ErrNoAccount = errors.New("no such account")
	// ErrNoToken means the token is unknown or already revoked.
	ErrNoToken = errors.New("no such active token")
)

// namespace for deterministic ids derived from account names.
var namespace = uuid.MustParse("6f3d1c52-5b0e-4d8e-9a55-0c1f4f2b7e10")

// IDForName is the account id that an account with this name gets.
func IDForName(name string) uuid.UUID { return uuid.NewSHA1(namespace, []byte("account/"+name)) }

// Hash is the stored form of a token.
func Hash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// NewToken returns a fresh random token: "pod_" and 43 URL-safe characters.
func NewToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return "pod_" + base64.RawURLEncoding.EncodeToString(b)
}

// Store reads and writes accounts and tokens.
type Store struct{ Pool *pgxpool.Pool }

// Create makes an account with a first token and returns both.
func (s Store) Create(ctx context.Context, name string) (uuid.UUID, string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return uuid.Nil, "", errors.New("account name is empty")
	}
	id := IDForName(name)
	token := NewToken()
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO accounts (account_id, name) VALUES ($1, $2)`, id, name); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23505" {
				return fmt.Errorf("%w: %q", ErrNameTaken, name)
			}
			return fmt.Errorf("insert account: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO api_tokens (token_hash, account_id) VALUES ($1, $2)`, Hash(token), id)
		if err != nil {
			return fmt.Errorf("insert token: %w", err)
		}
		return nil
	})
	if err != nil {
		return uuid.Nil, "", err
	}
	return id, token, nil
}

// Ensure makes sure an account with this name exists and that token is one
// of its tokens; it is how the demo account is made, at every start. A new
// token is added active; a token revoked before stays revoked (a restart
// must not undo "podctl token revoke"). active reports whether token
// authenticates the account now.
func (s Store) Ensure(ctx context.Context, name, token string) (id uuid.UUID, active bool, err error) {
	id = IDForName(name)
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO accounts (account_id, name) VALUES ($1, $2)
			ON CONFLICT (account_id) DO NOTHING`, id, name); err != nil {
			return fmt.Errorf("ensure account: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO api_tokens (token_hash, account_id) VALUES ($1, $2)
			ON CONFLICT (token_hash) DO NOTHING`, Hash(token), id); err != nil {
			return fmt.Errorf("ensure token: %w", err)
		}
		if err := tx.QueryRow(ctx, `SELECT account_id = $2 AND revoked_at IS NULL FROM api_tokens WHERE token_hash = $1`,
			Hash(token), id).Scan(&active); err != nil {
			return fmt.Errorf("ensure token: %w", err)
		}
		return nil
	})
	return id, active, err
}

// Issue adds a token to an existing account.
func (s Store) Issue(ctx context.Context, account uuid.UUID) (string, error) {
	token := NewToken()
	tag, err := s.Pool.Exec(ctx, `INSERT INTO api_tokens (token_hash, account_id)
		SELECT $1, account_id FROM accounts WHERE account_id = $2`, Hash(token), account)
	if err != nil {
		return "", fmt.Errorf("issue token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return "", fmt.Errorf("%w: %s", ErrNoAccount, account)
	}
	return token, nil
}

// Revoke makes a token answer 401 from now on: the revocation is
// announced to every instance's token cache when it commits.
func (s Store) Revoke(ctx context.Context, token string) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE api_tokens SET revoked_at = now()
			WHERE token_hash = $1 AND revoked_at IS NULL`, Hash(token))
		if err != nil {
			return fmt.Errorf("revoke token: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNoToken
		}
		b := &pgx.Batch{}
		cache.QueueAnnounce(b, TokenCache)
		return tx.SendBatch(ctx, b).Close()
	})
}

// TokenCache is the name of the token cache, announced on cache.Notify
// when a token is revoked.
const TokenCache = "tokens"

// Tokens answers Authenticate from memory for tokens seen active in the
// last TTL, and from the Store otherwise. Only active tokens are kept; a
// revocation drops the cache of every instance when it commits.
type Tokens struct {
	Store Store
	cache cache.Cache[string, uuid.UUID]
}

// NewTokens caches the store's active tokens for ttl.
func NewTokens(s Store, ttl time.Duration) *Tokens {
	return &Tokens{Store: s, cache: cache.Cache[string, uuid.UUID]{Name: TokenCache, TTL: ttl}}
}

// Follow keeps the cache in step with revocations announced on l (which
// must listen on cache.Notify) until ctx ends.
func (t *Tokens) Follow(ctx context.Context, l *pgnotify.Listener) { t.cache.Follow(ctx, l) }

// Authenticate returns the account of an active token, or ErrNoToken.
func (t *Tokens) Authenticate(ctx context.Context, token string) (uuid.UUID, error) {
	return t.cache.Load(string(Hash(token)), func() (uuid.UUID, error) { return t.Store.Authenticate(ctx, token) })
}

// Authenticate returns the account of an active token, or ErrNoToken.
func (s Store) Authenticate(ctx context.Context, token string) (uuid.UUID, error) {
	var id uuid.UUID
	err := s.Pool.QueryRow(ctx, `SELECT account_id FROM api_tokens
		WHERE token_hash = $1 AND revoked_at IS NULL`, Hash(token)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, ErrNoToken
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("authenticate: %w", err)
	}
	return id, nil
}
