package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// baselineWarm is the start of each baseline left out of its rate.
const baselineWarm = 500 * time.Millisecond

// measure runs op from conc goroutines for warm+dur and returns the rate of
// successful ops during dur.
func measure(ctx context.Context, conc int, dur time.Duration, op func(context.Context, int) error) (float64, error) {
	start := time.Now()
	from, until := start.Add(baselineWarm), start.Add(baselineWarm+dur)
	var ok atomic.Int64
	var firstErr atomic.Pointer[error]
	var fails atomic.Int64
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				t0 := time.Now()
				if !t0.Before(until) {
					return
				}
				err := op(ctx, w<<32|i)
				if err != nil {
					fails.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				if !t0.Before(from) {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if p := firstErr.Load(); p != nil && ok.Load() == 0 {
		return 0, *p
	}
	if n := fails.Load(); n > 0 {
		say("baseline: %d operations failed (first: %v)", n, *firstErr.Load())
	}
	return float64(ok.Load()) / dur.Seconds(), nil
}

// pgBaseline measures plain single-row INSERTs into a table of its own
// (dropped afterwards) over a pgxpool set up as podsvc sets up its pool
// (internal/pg: at least 32 connections, 5 minute idle time).
func pgBaseline(ctx context.Context, dbURL, run string, conc int, dur time.Duration, body []byte) (float64, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return 0, err
	}
	if cfg.MaxConns < 32 {
		cfg.MaxConns = 32
	}
	cfg.MaxConnIdleTime = 5 * time.Minute
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	table := pgx.Identifier{"podbench_baseline_" + run}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (
		id uuid PRIMARY KEY, reference_id text NOT NULL, body jsonb NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, fmt.Errorf("create baseline table: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(dctx, `DROP TABLE `+table); err != nil {
			say("could not drop baseline table %s: %v", table, err)
		}
	}()
	insert := `INSERT INTO ` + table + ` (id, reference_id, body) VALUES ($1, $2, $3)`
	return measure(ctx, conc, dur, func(ctx context.Context, i int) error {
		_, err := pool.Exec(ctx, insert, uuid.New(), fmt.Sprintf("baseline-%d", i), body)
		return err
	})
}

// httpBaseline measures a bare Fiber handler on loopback that answers 201
// with a small JSON body, driven by the load's HTTP client and body.
func httpBaseline(ctx context.Context, conc int, dur, timeout time.Duration, v variant) (float64, error) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	answer := []byte(`{"order_id":"00000000-0000-0000-0000-000000000000","status":"PENDING"}`)
	app.Post("/v1/orders/pod", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(fiber.StatusCreated).Send(answer)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	go func() { _ = app.Listener(ln) }()
	defer func() { _ = app.Shutdown() }()
	a := &api{base: "http://" + ln.Addr().String(), token: "baseline", hc: newHTTPClient(conc, timeout)}
	defer a.hc.CloseIdleConnections()
	return measure(ctx, conc, dur, func(ctx context.Context, i int) error {
		st, _, err := a.do(ctx, http.MethodPost, "/v1/orders/pod", v.body(fmt.Sprintf("baseline-%d", i)))
		if err == nil && st != http.StatusCreated {
			err = errors.New("unexpected status " + fmt.Sprint(st))
		}
		return err
	})
}
