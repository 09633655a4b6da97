package order

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/periodic"
	"github.com/printpod/pod/schemas"
	"github.com/prometheus/client_golang/prometheus"
)

// StatusCounts exports pod_orders{status}: how many orders the read model
// holds in each status, over all accounts. Every status is reported, zero
// included, so a dashboard never shows a gap for an empty status. The
// counts are the projector's (order_status_counts, a row per status),
// refreshed in the background, so a scrape never queries Postgres.
type StatusCounts struct {
	Pool *pgxpool.Pool
	Log  *slog.Logger

	desc   *prometheus.Desc
	mu     sync.Mutex
	counts map[string]int64 // nil until the first refresh
}

// NewStatusCounts registers the collector on reg.
func NewStatusCounts(reg prometheus.Registerer, pool *pgxpool.Pool, log *slog.Logger) *StatusCounts {
	s := &StatusCounts{Pool: pool, Log: log,
		desc: prometheus.NewDesc("pod_orders", "Orders in the read model by status.", []string{"status"}, nil)}
	reg.MustRegister(s)
	return s
}

// Describe implements prometheus.Collector.
func (s *StatusCounts) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector with the last refreshed counts.
func (s *StatusCounts) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		return
	}
	for _, st := range schemas.OrderStatuses {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, float64(s.counts[st]), st)
	}
}

// Refresh counts the orders once.
func (s *StatusCounts) Refresh(ctx context.Context) error {
	rows, err := s.Pool.Query(ctx, `SELECT status, n FROM order_status_counts`)
	if err != nil {
		return fmt.Errorf("count orders by status: %w", err)
	}
	defer rows.Close()
	counts := map[string]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return fmt.Errorf("count orders by status: %w", err)
		}
		counts[st] = n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("count orders by status: %w", err)
	}
	s.mu.Lock()
	s.counts = counts
	s.mu.Unlock()
	return nil
}

// Run refreshes every interval until ctx ends.
func (s *StatusCounts) Run(ctx context.Context, interval time.Duration) {
	periodic.Run(ctx, interval, func(ctx context.Context) {
		if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
			s.Log.Warn("counting orders by status failed", "err", err)
		}
	})
}
