package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/accounts"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/rdb"
	"github.com/printpod/pod/internal/stream"
	catalogrm "github.com/printpod/pod/projections/catalog"
	configrm "github.com/printpod/pod/projections/config"
	"github.com/printpod/pod/schemas"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	podhttp "github.com/printpod/pod/http"
)

// App is a running podsvc.
type App struct {
	Config      config.Config
	Log         *slog.Logger
	Pool        *pgxpool.Pool
	Redis       *redis.Client
	Producer    *kgo.Client
	Brokers     []string
	Registry    *prometheus.Registry
	DemoAccount uuid.UUID
	// DemoOffsets are the catalog offsets the demo load published at this
	// start (empty when it was already published before).
	DemoOffsets map[int32]int64

	embedded *kafka.Embedded
	listener net.Listener
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	serveErr chan error
	stopOnce sync.Once
	stopAPI  func(context.Context) error
}

// Start builds every dependency and starts the configured roles. The
// returned App runs until Stop.
func Start(ctx context.Context, cfg config.Config, log *slog.Logger) (_ *App, err error) {
	a := &App{Config: cfg, Log: log, Registry: prometheus.NewRegistry(), serveErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			a.closeDeps()
		}
	}()
	a.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	if a.Pool, err = pg.Open(ctx, cfg.DatabaseURL); err != nil {
		return nil, err
	}
	if a.Redis, err = rdb.Open(ctx, cfg.RedisURL); err != nil {
		return nil, err
	}
	if cfg.Embedded() {
		if a.embedded, err = kafka.StartEmbedded(cfg.KafkaDataDir(), cfg.EmbeddedKafkaPort, cfg.KafkaAddrFile()); err != nil {
			return nil, err
		}
		a.Brokers = []string{a.embedded.Addr()}
		log.Info("embedded kafka started", "addr", a.embedded.Addr(), "data_dir", cfg.KafkaDataDir())
	} else {
		a.Brokers = cfg.KafkaBrokers
	}
	if a.Producer, err = kafka.NewProducer(a.Brokers, a.kafkaMetrics("producer")...); err != nil {
		return nil, err
	}
	topicCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err = kafka.EnsureTopics(topicCtx, a.Producer, cfg.KafkaPartitions, schemas.AllTopics()...); err != nil {
		return nil, err
	}

	runCtx, runCancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = runCancel
	runner := &stream.Runner{Pool: a.Pool, Brokers: a.Brokers, Log: log, Metrics: stream.NewMetrics(a.Registry)}

	if cfg.HasRole(config.RoleProjector) {
		a.runConsumer(runCtx, runner, catalogrm.Projector(log))
	}
	if !cfg.Production() && cfg.DemoToken != "" {
		if err = a.loadDemo(ctx); err != nil {
			runCancel()
			a.wg.Wait()
			return nil, err
		}
	}
	if cfg.HasRole(config.RoleAPI) {
		if err = a.startAPI(); err != nil {
			runCancel()
			a.wg.Wait()
			return nil, err
		}
	}
	return a, nil
}

func (a *App) runConsumer(ctx context.Context, runner *stream.Runner, c stream.Consumer) {
	c.ClientOpts = append(c.ClientOpts, a.kafkaMetrics(c.Name)...)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := runner.Run(ctx, c); err != nil {
			a.Log.Error("consumer stopped", "consumer", c.Name, "err", err)
		}
	}()
}

func (a *App) startAPI() error {
	cfg := a.Config
	server := &podhttp.Server{
		Log:       a.Log,
		Auth:      accounts.Store{Pool: a.Pool},
		Redis:     a.Redis,
		RateLimit: podhttp.RateLimit{Rate: cfg.RateLimit, Burst: cfg.RateBurst, Prefix: cfg.RedisPrefix},
		Catalog:   catalogrm.Queries{Pool: a.Pool},
		Config:    configrm.Queries{Pool: a.Pool},
		Metrics:   podhttp.NewMetrics(a.Registry),
		Gatherer:  a.Registry,
		Checks: []podhttp.Check{
			{Name: "postgres", Check: func(ctx context.Context) error { return a.Pool.Ping(ctx) }},
			{Name: "redis", Check: func(ctx context.Context) error { return a.Redis.Ping(ctx).Err() }},
			{Name: "kafka", Check: func(ctx context.Context) error { return a.Producer.Ping(ctx) }},
		},
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	a.listener = ln
	fapp := server.App()
	go func() { a.serveErr <- fapp.Listener(ln) }()
	a.stopAPI = func(ctx context.Context) error { return fapp.ShutdownWithContext(ctx) }
	return nil
}

// Addr is the API's listen address (useful when POD_HTTP_ADDR has port 0).
func (a *App) Addr() string {
	if a.listener == nil {
		return ""
	}
	return a.listener.Addr().String()
}

// Wait blocks until the API server fails or ctx ends.
func (a *App) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-a.serveErr:
		return fmt.Errorf("http server: %w", err)
	}
}

// Stop shuts everything down in order, within the configured timeout.
func (a *App) Stop() {
	a.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), a.Config.ShutdownTimeout)
		defer cancel()
		if a.stopAPI != nil {
			if err := a.stopAPI(ctx); err != nil {
				a.Log.Warn("http shutdown", "err", err)
			}
		}
		if a.cancel != nil {
			a.cancel()
		}
		done := make(chan struct{})
		go func() { a.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			a.Log.Warn("consumers did not stop in time")
		}
		a.closeDeps()
	})
}

func (a *App) closeDeps() {
	if a.Producer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.Producer.Flush(ctx); err != nil && !errors.Is(err, context.Canceled) {
			a.Log.Warn("producer flush", "err", err)
		}
		cancel()
		a.Producer.Close()
	}
	if a.embedded != nil {
		a.embedded.Close()
	}
	if a.Redis != nil {
		a.Redis.Close()
	}
	if a.Pool != nil {
		a.Pool.Close()
	}
}
