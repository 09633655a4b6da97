// Package pgtest gives a test a Postgres database of its own, migrated, and
// a pool on it (closed when the test ends, after its deferred calls).
package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/testenv"
)

// NewPool creates a database for t, applies the migrations and opens a
// pool on it.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	url := testenv.NewDatabase(t)
	if err := pg.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	pool, err := pg.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
