// Package pg opens the Postgres pool, creates the database when it is missing
// and applies the embedded migrations under an advisory lock, so several
// instances can start at once.
package pg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
	"github.com/printpod/pod/schemas"
)

// Open creates the database named in url if it does not exist, applies the
// migrations and returns a pool.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	if err := EnsureDatabase(ctx, url); err != nil {
		return nil, err
	}
	if err := Migrate(ctx, url); err != nil {
		return nil, err
	}
	return NewPool(ctx, url, 32)
}

// NewPool opens a pool of at least maxConns connections (more when the URL
// says so) on a migrated database. podsvc keeps two: the API's, and one for
// the deciders, projectors and delivery stages, so background work never
// queues behind a burst of requests for a connection.
func NewPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return newPool(ctx, url, maxConns, nil)
}

// WorkLockTimeout bounds every lock wait of the background work's
// connections. A stage blocked on a lock (a zombie's, an operator's) fails
// its batch after it and retries with backoff rather than waiting on: a
// statement waiting holds its snapshot, and a snapshot held for long keeps
// Postgres from cleaning up after every other transaction (the job queue's
// dead index entries, HOT pruning), which slowed the whole service while one
// stage's offsets were held locked.
const WorkLockTimeout = 5 * time.Second

// NewWorkPool is NewPool for the deciders, projectors, pusher and delivery:
// its lock waits end after WorkLockTimeout.
func NewWorkPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return newPool(ctx, url, maxConns, map[string]string{"lock_timeout": fmt.Sprintf("%dms", WorkLockTimeout.Milliseconds())})
}

func newPool(ctx context.Context, url string, maxConns int32, params map[string]string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	for k, v := range params {
		if _, ok := cfg.ConnConfig.RuntimeParams[k]; !ok {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
	}
	if cfg.MaxConns < maxConns {
		cfg.MaxConns = maxConns
	}
	cfg.MaxConnIdleTime = 5 * time.Minute
	// Statements are prepared once per connection, and after five runs
	// Postgres may keep a generic plan for good. One made while a table
	// was empty (a fresh database) scans it sequentially forever after,
	// however large it grows: order_decisions was read by thousands of
	// sequential scans in a 20 s benchmark that way. Planning each run
	// with its own parameters costs little next to that, and a batch
	// statement is planned once per batch.
	if _, ok := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !ok {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	// The tables an order's path reads live in shared buffers or on SSD,
	// where a random page costs about what a sequential one does. At the
	// default of 4 the planner chose sequential scans of order_decisions
	// and order_push_attempts for a batch's lookups until they held tens of
	// thousands of rows: 88 of 125 rows read per order in a 1,000 orders/s
	// run. A URL that names random_page_cost keeps its own.
	if _, ok := cfg.ConnConfig.RuntimeParams["random_page_cost"]; !ok {
		cfg.ConnConfig.RuntimeParams["random_page_cost"] = "1.1"
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		registerUUID(c.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping postgres: %w", err)
	}
	return pool, nil
}

// EnsureDatabase connects to the maintenance database of the same server and
// creates the target database when it is missing.
func EnsureDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	name := cfg.Database
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connect to postgres: %w", err)
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	aconn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to postgres to create database %q: %w", name, err)
	}
	defer aconn.Close(ctx)
	_, err = aconn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42P04") { // duplicate_database
		return fmt.Errorf("create database %q: %w", name, err)
	}
	return nil
}

// Migrate applies every pending migration of schemas.Migrations.
func Migrate(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect for migrations: %w", err)
	}
	defer conn.Close(ctx)
	m, err := migrate.NewMigrator(ctx, conn, "schema_version")
	if err != nil {
		return fmt.Errorf("prepare migrations: %w", err)
	}
	sub, err := fs.Sub(schemas.Migrations, "migrations")
	if err != nil {
		return fmt.Errorf("open embedded migrations: %w", err)
	}
	if err := m.LoadMigrations(sub); err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// OpenMigrated opens a pool on a database podsvc has made and migrated to
// this build's schema, and refuses any other, changing nothing: an
// operator's tool pointed at a mistyped DATABASE_URL must not make a
// database of its own (an account made there holds a token that works
// nowhere), nor migrate one under a fleet of another release.
func OpenMigrated(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	pool, err := NewPool(ctx, url, maxConns)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
		return nil, fmt.Errorf("database %q does not exist: check DATABASE_URL (podsvc makes and migrates its database when it starts)", cfg.Database)
	}
	if err != nil {
		return nil, err
	}
	refuse := func(format string, args ...any) (*pgxpool.Pool, error) {
		pool.Close()
		return nil, fmt.Errorf("database %q "+format, append([]any{cfg.Database}, args...)...)
	}
	have := int32(-1) // no schema of this service
	var made bool
	err = pool.QueryRow(ctx, `SELECT to_regclass('schema_version') IS NOT NULL`).Scan(&made)
	if err == nil && made {
		err = pool.QueryRow(ctx, `SELECT version FROM schema_version`).Scan(&have)
	}
	if err != nil {
		return refuse("schema version unreadable: %v", err)
	}
	want, err := SchemaVersion()
	if err != nil {
		pool.Close()
		return nil, err
	}
	switch {
	case have < 0:
		return refuse("has no schema of this service: check DATABASE_URL (podsvc migrates its database when it starts)")
	case have < want:
		return refuse("is at schema version %d, this build's is %d: start this release's podsvc on it first (it migrates it), or use the tool of the release running on it", have, want)
	case have > want:
		return refuse("is at schema version %d, newer than this build's %d: use the tool of the release running on it", have, want)
	}
	return pool, nil
}

// SchemaVersion is the version this build's migrations bring a database
// to: the number of migrations, as the migrator finds them.
func SchemaVersion() (int32, error) {
	sub, err := fs.Sub(schemas.Migrations, "migrations")
	if err != nil {
		return 0, fmt.Errorf("open embedded migrations: %w", err)
	}
	names, err := migrate.FindMigrations(sub)
	if err != nil {
		return 0, fmt.Errorf("list embedded migrations: %w", err)
	}
	return int32(len(names)), nil
}

// IsUnavailable reports whether err means Postgres could not be reached
// (connection refused, reset, shutting down), as opposed to a query error.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	// Any failure to connect, whatever the server said (refused, too many
	// connections, starting up, unknown database), is the database being
	// unavailable to us, not a fault of the request.
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 57P01..57P03: admin shutdown, crash shutdown, cannot connect now;
		// 08: connection exceptions; 53: insufficient resources (too many
		// connections, out of memory or disk).
		return pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" ||
			strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "53")
	}
	return pgconn.SafeToRetry(err) || errors.Is(err, context.DeadlineExceeded)
}

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// TryLock takes the session advisory lock named key, on a connection of
// its own that it keeps until unlock, which frees both. held is false, and
// nothing is held, when another session holds the lock: a second run of
// a command that must run once at a time.
func TryLock(ctx context.Context, pool *pgxpool.Pool, key string) (unlock func(), held bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("take the lock %q: %w", key, err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, key).Scan(&held); err != nil || !held {
		conn.Release()
		if err != nil {
			return nil, false, fmt.Errorf("take the lock %q: %w", key, err)
		}
		return nil, false, nil
	}
	return func() {
		// A session lock outlives the statement: the connection goes back
		// to the pool only once it is freed, else it is closed.
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}, true, nil
}
