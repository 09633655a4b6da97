package pg

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestIsUnavailable(t *testing.T) {
	// Real connection failures from the machine's Postgres server.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, missingDB := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:5432/pod_no_such_database_here?sslmode=disable")
	_, refused := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:1/pod?sslmode=disable&connect_timeout=2")
	if missingDB == nil || refused == nil {
		t.Fatalf("connections that must fail succeeded: %v %v", missingDB, refused)
	}

	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"server refuses the database (3D000 at connect)", missingDB, true},
		{"nothing listens", refused, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"disk full", &pgconn.PgError{Code: "53100"}, true},
		{"cannot connect now (starting up)", &pgconn.PgError{Code: "57P03"}, true},
		{"admin shutdown", fmt.Errorf("query: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), true},
		{"unique violation is a query error", &pgconn.PgError{Code: "23505"}, false},
		{"syntax error is a bug", &pgconn.PgError{Code: "42601"}, false},
		{"plain error", errors.New("boom"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsUnavailable(tc.err); got != tc.want {
				t.Fatalf("IsUnavailable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
