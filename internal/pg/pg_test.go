package pg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/printpod/pod/internal/testenv"
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

// TestUUIDRoundTrip: uuid.UUID values, slices and pointers go to
// Postgres as uuid and come back equal through a pool from Open.
func TestUUIDRoundTrip(t *testing.T) {
	ctx := context.Background()
	pool, err := Open(ctx, testenv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	a, b := uuid.New(), uuid.New()
	var back uuid.UUID
	var text string
	if err := pool.QueryRow(ctx, `SELECT $1::uuid, $1::uuid::text`, a).Scan(&back, &text); err != nil {
		t.Fatal(err)
	}
	if back != a || text != a.String() {
		t.Fatalf("round trip: %s %s, want %s", back, text, a)
	}
	var ids []uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT array_agg(x ORDER BY o) FROM unnest($1::uuid[]) WITH ORDINALITY AS t(x, o)`,
		[]uuid.UUID{a, b}).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids[0] != a || ids[1] != b {
		t.Fatalf("array: %v", ids)
	}
	var found bool
	if err := pool.QueryRow(ctx, `SELECT $1 = ANY($2::uuid[])`, b, []uuid.UUID{a, b}).Scan(&found); err != nil || !found {
		t.Fatalf("ANY: %v %v", found, err)
	}
	var maybe *uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT NULL::uuid`).Scan(&maybe); err != nil || maybe != nil {
		t.Fatalf("NULL into *uuid.UUID: %v %v", maybe, err)
	}
	if err := pool.QueryRow(ctx, `SELECT $1::uuid`, &b).Scan(&maybe); err != nil || maybe == nil || *maybe != b {
		t.Fatalf("pointer: %v %v", maybe, err)
	}
}

// TestOpenMigratedTakesOnlyThisBuildsSchema: an operator's tool opens a
// database podsvc made and migrated to the build's schema, and refuses,
// changing nothing, a missing database (a mistyped DATABASE_URL), one with
// no schema, and one at another version (found by review: podctl made and
// migrated whatever DATABASE_URL named).
func TestOpenMigratedTakesOnlyThisBuildsSchema(t *testing.T) {
	ctx := context.Background()
	want, err := SchemaVersion()
	if err != nil || want < 22 {
		t.Fatalf("schema version %d (%v): the embedded migrations were not counted", want, err)
	}
	migrated := testenv.NewDatabase(t)
	if err := Migrate(ctx, migrated); err != nil {
		t.Fatal(err)
	}
	setVersion := func(v int32) {
		t.Helper()
		conn, err := pgx.Connect(ctx, migrated)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `UPDATE schema_version SET version = $1`, v); err != nil {
			t.Fatal(err)
		}
	}
	missing := strings.Replace(testenv.NewDatabase(t), "pod_test_", "pod_absent_", 1)
	for _, tc := range []struct {
		name    string
		url     string
		version int32
		refusal string // "" for opened
	}{
		{"a database migrated to this build's schema is opened", migrated, want, ""},
		{"a database that does not exist is refused", missing, want, "does not exist"},
		{"a database with no schema is refused", testenv.NewDatabase(t), want, "has no schema"},
		{"a database at an older schema is refused", migrated, want - 1, "start this release's podsvc"},
		{"a database at a newer schema is refused", migrated, want + 1, "newer than this build's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setVersion(tc.version)
			pool, err := OpenMigrated(ctx, tc.url, 2)
			if tc.refusal == "" {
				if err != nil {
					t.Fatal(err)
				}
				pool.Close()
				return
			}
			if err == nil {
				pool.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("refused with %q, want it to say %q", err, tc.refusal)
			}
		})
	}
	// Nothing was made for the missing one.
	if _, err := OpenMigrated(ctx, missing, 2); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("the missing database after the refusals: %v", err)
	}
}

// TestPruneDropsOldDecisionsInRuns: every decision older than the
// retention goes, over several runs of PruneRun, and none younger.
func TestPruneDropsOldDecisionsInRuns(t *testing.T) {
	ctx := context.Background()
	url := testenv.NewDatabase(t)
	if err := Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	pool, err := NewPool(ctx, url, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	old := 2*PruneRun + 17
	if _, err := pool.Exec(ctx, `INSERT INTO order_decisions (command_id, order_id, version, decided_at)
		SELECT gen_random_uuid(), gen_random_uuid(), 1, now() - interval '8 days' - g * interval '1 second' FROM generate_series(1, $1) AS g
		UNION ALL SELECT gen_random_uuid(), gen_random_uuid(), 1, now() - interval '6 days' FROM generate_series(1, 10)`, old); err != nil {
		t.Fatal(err)
	}
	if err := (Decisions{Table: "order_decisions"}).Prune(ctx, pool, 7*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	var left, young int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE decided_at > now() - interval '7 days') FROM order_decisions`).
		Scan(&left, &young); err != nil {
		t.Fatal(err)
	}
	if left != 10 || young != 10 {
		t.Fatalf("%d decisions left, %d of them younger than the retention; want the 10 young ones", left, young)
	}
}
