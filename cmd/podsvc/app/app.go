package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/batch"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/commands/push"
	"github.com/printpod/pod/commands/webhook"
	"github.com/printpod/pod/delivery"
	"github.com/printpod/pod/internal/accounts"
	"github.com/printpod/pod/internal/cache"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/periodic"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/pgnotify"
	"github.com/printpod/pod/internal/rdb"
	"github.com/printpod/pod/internal/secretbox"
	"github.com/printpod/pod/internal/stream"
	catalogrm "github.com/printpod/pod/projections/catalog"
	configrm "github.com/printpod/pod/projections/config"
	deliveryrm "github.com/printpod/pod/projections/delivery"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	podhttp "github.com/printpod/pod/http"
)

// App is a running podsvc.
type App struct {
	Config   config.Config
	Log      *slog.Logger
	Pool     *pgxpool.Pool // the API's (and operator tasks')
	Work     *pgxpool.Pool // deciders, projectors, pusher and delivery: never waits behind requests
	Redis    *redis.Client
	counters *redis.Client // the API's counters (rdb.OpenCounters)
	Producer *kgo.Client
	Brokers  []string
	// Naming is how topics and consumer groups are named on the cluster
	// (POD_KAFKA_TOPIC_PREFIX, POD_KAFKA_GROUP_PREFIX).
	Naming      schemas.Naming
	Registry    *prometheus.Registry
	DemoAccount uuid.UUID
	// DemoOffsets are the catalog offsets the demo load published at this
	// start (empty when it was already published before).
	DemoOffsets map[int32]int64
	Notify      *pgnotify.Listener
	Bus         *order.Bus
	WebhookBus  *webhook.Bus
	Box         *secretbox.Box // seals webhook secrets
	Guard       *delivery.Guard
	Streaks     *delivery.Streaks
	Sender      *delivery.Sender // nil without the delivery role
	// StageMetrics are the consumer metrics every stage and the sender's
	// dead letters are counted in.
	StageMetrics *stream.Metrics
	Pusher       *push.Worker    // nil without the pusher role
	Simulator    *push.Simulator // the built-in platform, when started

	embedded      *kafka.Embedded
	brokerMetrics *brokerMetrics // of every Kafka client (kafkaMetrics)
	listener      net.Listener
	cancel        context.CancelFunc
	stopPusher    context.CancelFunc // the pusher's own cancel, first at Stop
	wg            sync.WaitGroup
	serveErr      chan error
	stopOnce      sync.Once
	stopAPI       func(context.Context) error
	closers       []func() // run last by Stop (or a failed Start)
}

// Start builds every dependency and starts the configured roles. The
// returned App runs until Stop.
func Start(ctx context.Context, cfg config.Config, log *slog.Logger) (_ *App, err error) {
	a := &App{Config: cfg, Log: log, Naming: cfg.Naming(), Registry: prometheus.NewRegistry(), serveErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			a.closeDeps()
		}
	}()
	a.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.brokerMetrics = newBrokerMetrics(a.Registry)

	if a.Box, err = cfg.SecretBox(); err != nil {
		return nil, err
	}
	if cfg.WebhookSecretKey == "" {
		log.Warn("POD_WEBHOOK_SECRET_KEY is not set: webhook secrets are sealed with the fixed development key")
	}
	a.Guard = &delivery.Guard{Production: cfg.Production(), AllowTargets: cfg.WebhookAllowTargets}
	if a.Pool, err = pg.Open(ctx, cfg.DatabaseURL); err != nil {
		return nil, err
	}
	if a.Work, err = pg.NewWorkPool(ctx, cfg.DatabaseURL, 16); err != nil {
		return nil, err
	}
	rdb.UseLogger(log)
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
	a.registerProducerBuffer()
	topicCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, ts := range TopicSpecs(cfg) {
		if err = kafka.EnsureTopics(topicCtx, a.Producer, ts.Spec, ts.Topics...); err != nil {
			return nil, err
		}
	}

	if err = a.startPprof(); err != nil {
		return nil, err
	}
	runCtx, runCancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = runCancel
	a.startGauges(runCtx)
	a.StageMetrics = stream.NewMetrics(a.Registry)
	runner := &stream.Runner{Pool: a.Work, Brokers: a.Brokers, Log: log, Metrics: a.StageMetrics, Producer: a.Producer,
		Naming: a.Naming}

	a.Notify = pgnotify.New(a.Pool, log, order.NotifyDecided, orderrm.NotifyProjected, jobs.Notify,
		webhook.NotifyDecided, cache.Notify)
	a.goRun(func() { a.Notify.Run(runCtx) })
	a.Bus = &order.Bus{Producer: a.Producer, Pool: a.Pool, Notify: a.Notify, Naming: a.Naming}
	a.WebhookBus = &webhook.Bus{Producer: a.Producer, Pool: a.Pool, Notify: a.Notify, Naming: a.Naming}
	a.Streaks = &delivery.Streaks{Redis: a.Redis, Prefix: cfg.RedisPrefix, Log: log}

	if cfg.HasRole(config.RoleProjector) {
		a.runConsumer(runCtx, runner, catalogrm.Projector(a.Naming, log))
		a.runConsumer(runCtx, runner, orderrm.Projector(a.Naming, log))
		a.runConsumer(runCtx, runner, deliveryrm.Projector(a.Naming, log))
		a.goRun(func() { deliveryrm.Sweeper(runCtx, a.Work, cfg.DeliveryRetention, time.Hour, log) })
	}
	if cfg.HasRole(config.RoleDecider) {
		a.runConsumer(runCtx, runner, (&order.Decider{Log: log, Naming: a.Naming, RetryDelays: cfg.PushRetryDelays}).Consumer())
		a.runConsumer(runCtx, runner, order.FulfillmentBridge(a.Naming, log))
		a.runConsumer(runCtx, runner, (&webhook.Decider{Log: log, Naming: a.Naming, Box: a.Box}).Consumer())
		a.goRun(func() { pruneDecisions(runCtx, a.Work, log) })
	}
	if cfg.HasRole(config.RoleDelivery) {
		if err = a.startDelivery(runCtx, runner); err != nil {
			runCancel()
			a.wg.Wait()
			return nil, err
		}
	}
	if cfg.HasRole(config.RolePusher) {
		if err = a.startPusher(runCtx); err != nil {
			runCancel()
			a.wg.Wait()
			return nil, err
		}
	}
	if !cfg.Production() && cfg.DemoToken != "" {
		if err = a.loadDemo(ctx); err != nil {
			runCancel()
			a.wg.Wait()
			return nil, err
		}
	}
	if err = a.startHTTP(runCtx); err != nil {
		runCancel()
		a.wg.Wait()
		return nil, err
	}
	return a, nil
}

// TopicSet is topics created alike.
type TopicSet struct {
	Spec   kafka.TopicSpec
	Topics []string // cluster names
}

// TopicSpecs are every topic podsvc creates on start (those missing), with
// how: POD_KAFKA_PARTITIONS partitions (dead-letter topics one), replication
// POD_KAFKA_REPLICATION (0: min(3, brokers)), and on real Kafka a retention
// of POD_KAFKA_RETENTION for commands and events, none for the catalog's
// events (the catalog read model's only source: a replay must find every
// store and product), Config.RetryTierRetention for the delivery retry
// tiers and POD_KAFKA_DLQ_RETENTION for dead letters.
// The embedded broker gets no retention: it keeps everything, as it always
// has. docs/kafka.md lists them.
func TopicSpecs(cfg config.Config) []TopicSet {
	n := cfg.Naming()
	retention := func(d time.Duration) time.Duration {
		if cfg.Embedded() {
			return 0
		}
		return d
	}
	spec := func(partitions int, d time.Duration) kafka.TopicSpec {
		return kafka.TopicSpec{Partitions: partitions, Replication: cfg.KafkaReplication, Retention: retention(d)}
	}
	var main []string
	for _, t := range schemas.LogicalTopics() {
		if t != schemas.TopicWebhookDLQ && t != schemas.TopicCatalogEvents && !slices.Contains(schemas.WebhookRetryTiers, t) {
			main = append(main, n.Topic(t))
		}
	}
	return []TopicSet{
		{Spec: spec(cfg.KafkaPartitions, cfg.KafkaRetention), Topics: main},
		{Spec: spec(cfg.KafkaPartitions, kafka.Forever), Topics: []string{n.Topic(schemas.TopicCatalogEvents)}},
		{Spec: spec(cfg.KafkaPartitions, cfg.RetryTierRetention()), Topics: n.RetryTiers()},
		{Spec: spec(cfg.KafkaPartitions, cfg.KafkaDLQRetention), Topics: []string{n.Topic(schemas.TopicWebhookDLQ)}},
		// Every consumer's dead-letter topic (the stages' and the webhook
		// sender's), whatever roles this process runs: podctl dlq reads them all.
		{Spec: spec(schemas.DeadLetterPartitions, cfg.KafkaDLQRetention), Topics: n.DeadLetterTopics(ConsumerGroups...)},
	}
}

// StageConsumers names every consumer run by the stream runner; each has a
// dead-letter topic (schemas.Naming.DeadLetterTopic), created on start.
var StageConsumers = []string{
	order.DeciderName, order.FulfillmentBridgeName, webhook.DeciderName,
	catalogrm.ConsumerName, orderrm.ConsumerName, deliveryrm.ConsumerName,
	delivery.FanoutName,
}

// ConsumerGroups names every consumer the service runs (their group ids
// are these with POD_KAFKA_GROUP_PREFIX); their lag is on /metrics.
var ConsumerGroups = append(slices.Clone(StageConsumers), delivery.SenderGroup)

// startGauges starts the background readers behind the gauges that need a
// query: consumer lag and end offsets (every process), orders by status
// (processes with the projector role).
func (a *App) startGauges(ctx context.Context) {
	every := a.Config.MetricsRefresh
	topics := append(a.Naming.AllTopics(), a.Naming.DeadLetterTopics(ConsumerGroups...)...)
	groups := make([]string, len(ConsumerGroups))
	for i, g := range ConsumerGroups {
		groups[i] = a.Naming.Group(g)
	}
	lag := kafka.NewLag(a.Registry, kadm.NewClient(a.Producer), groups, topics, a.Log)
	lag.Naming = a.Naming // labels keep the logical names
	var counts *orderrm.StatusCounts
	if a.Config.HasRole(config.RoleProjector) {
		counts = orderrm.NewStatusCounts(a.Registry, a.Work, a.Log)
	}
	if every <= 0 {
		return
	}
	a.goRun(func() { lag.Run(ctx, every) })
	if counts != nil {
		a.goRun(func() { counts.Run(ctx, 3*every) })
	}
}

func (a *App) runConsumer(ctx context.Context, runner *stream.Runner, c stream.Consumer) {
	if !slices.Contains(StageConsumers, c.Name) {
		// Its dead letters would have no topic to go to.
		panic("consumer " + c.Name + " is missing from app.StageConsumers")
	}
	c.SessionOpts = func() []kgo.Opt { return a.groupMember(c.Name) }
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := runner.Run(ctx, c); err != nil {
			a.Log.Error("consumer stopped", "consumer", c.Name, "err", err)
		}
	}()
}

// goRun runs f as one of the app's background tasks (Stop waits for it).
func (a *App) goRun(f func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f()
	}()
}

// startPusher starts the push worker (order push jobs), and in development the
// built-in store platform simulator when no POD_PLATFORM_URL is set.
func (a *App) startPusher(ctx context.Context) error {
	base := a.Config.PlatformURL
	shops := newShopCatalog(ctx, a.Work, a.Notify)
	if base == "" {
		sim := push.NewSimulator(shops.Authorized)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("platform simulator: %w", err)
		}
		srv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		a.goRun(func() {
			<-ctx.Done()
			_ = srv.Close()
		})
		a.Simulator = sim
		base = "http://" + ln.Addr().String()
		a.Log.Info("store platform simulator started", "addr", ln.Addr().String())
	}
	// The pusher drains its calls within half the shutdown timeout, from
	// the start of Stop (it is stopped first: no request of the API waits
	// on it), so their outcomes go out before the producer closes.
	a.Pusher = &push.Worker{Pool: a.Work, Producer: a.Producer, Platform: &push.Client{BaseURL: base},
		Shops: shops.ShopDomains, Notify: a.Notify, Log: a.Log, Naming: a.Naming,
		Drain: min(push.DrainGrace, a.Config.ShutdownTimeout/2)}
	pushCtx, stopPusher := context.WithCancel(ctx)
	a.stopPusher = stopPusher
	a.goRun(func() { a.Pusher.Run(pushCtx) })
	return nil
}

// startDelivery starts the fan-out of order events to delivery tasks and
// the sender working them.
func (a *App) startDelivery(ctx context.Context, runner *stream.Runner) error {
	cfg := a.Config
	// The done marks of every delivery in flight share Redis round trips.
	marks, err := a.Redis.AsyncAutoPipeline()
	if err != nil {
		return fmt.Errorf("redis automatic pipelining: %w", err)
	}
	a.runConsumer(ctx, runner, (&delivery.Fanout{Log: a.Log, Naming: a.Naming}).Consumer())
	a.Sender = &delivery.Sender{
		Hooks:    &delivery.Hooks{Pool: a.Work, Box: a.Box},
		Producer: a.Producer,
		Brokers:  a.Brokers,
		HTTP:     a.Guard.Client(cfg.WebhookTimeout, cfg.WebhookConcurrency),
		Guard:    a.Guard,
		Streaks:  a.Streaks,
		Marks:    &delivery.DoneMarks{Redis: marks, Prefix: cfg.RedisPrefix, Log: a.Log.With("component", "delivery")},
		Disable: func(ctx context.Context, id, account uuid.UUID, gen int) error {
			return webhook.Send(ctx, a.Producer, a.Naming, webhook.Command{ID: uuid.NewSHA1(id, fmt.Appendf(nil, "auto-disable/%d", gen)),
				Kind: webhook.KindDisable, AccountID: account, WebhookID: id, Gen: gen, Reason: webhook.ReasonTooManyFailures})
		},
		Delays:      cfg.WebhookRetryDelays,
		Timeout:     cfg.WebhookTimeout,
		Log:         a.Log.With("component", "delivery"),
		Metrics:     delivery.NewMetrics(a.Registry),
		DeadLetters: a.StageMetrics,
		Concurrency: cfg.WebhookConcurrency,
		PerEndpoint: cfg.WebhookPerEndpoint,
		ClientOpts:  func() []kgo.Opt { return a.groupMember(delivery.SenderGroup) },
		Naming:      a.Naming,
	}
	a.goRun(func() { a.Sender.Run(ctx) })
	return nil
}

// pruneDecisions drops the deciders' old decisions hourly.
func pruneDecisions(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) {
	periodic.Run(ctx, time.Hour, func(ctx context.Context) {
		for _, d := range []struct {
			decisions pg.Decisions
			keep      time.Duration
		}{{order.Decisions, order.DecisionRetention}, {webhook.Decisions, webhook.DecisionRetention}} {
			if err := d.decisions.Prune(ctx, pool, d.keep); err != nil && ctx.Err() == nil {
				log.Warn("pruning decisions failed", "table", d.decisions.Table, "err", err)
			}
		}
	})
}

// startHTTP listens on POD_HTTP_ADDR: the whole API with the api role,
// else only /healthz, /readyz and /metrics.
func (a *App) startHTTP(ctx context.Context) error {
	cfg := a.Config
	server := &podhttp.Server{
		Log:      a.Log,
		Metrics:  podhttp.NewMetrics(a.Registry),
		Gatherer: a.Registry,
		Checks: []podhttp.Check{
			{Name: "postgres", Check: func(ctx context.Context) error { return a.Pool.Ping(ctx) }},
			{Name: "redis", Check: func(ctx context.Context) error { return a.Redis.Ping(ctx).Err() }, Degrades: true},
			{Name: "kafka", Check: func(ctx context.Context) error { return a.Producer.Ping(ctx) }},
		},
	}
	var fapp *fiber.App
	if cfg.HasRole(config.RoleAPI) {
		var err error
		if fapp, err = a.apiApp(ctx, server); err != nil {
			return err
		}
	} else {
		fapp = server.OpsApp()
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	a.listener = ln
	go func() { a.serveErr <- fapp.Listener(ln) }()
	a.stopAPI = func(ctx context.Context) error { return fapp.ShutdownWithContext(ctx) }
	return nil
}

// apiApp completes server with the API's parts and builds the full app.
func (a *App) apiApp(ctx context.Context, server *podhttp.Server) (*fiber.App, error) {
	cfg := a.Config
	// The API's per-request Redis commands (rate limits, the soft duplicate
	// claim) share round trips under load.
	counterClient, counters, err := rdb.OpenCounters(a.Redis)
	if err != nil {
		return nil, fmt.Errorf("redis automatic pipelining: %w", err)
	}
	a.counters = counterClient
	catalog := newOrderCatalog(ctx, a.Pool, a.Notify)
	tokens := accounts.NewTokens(accounts.Store{Pool: a.Pool}, time.Minute)
	tokens.Follow(ctx, a.Notify)
	orders := &podhttp.Orders{
		Creator: &order.Creator{Catalog: catalog, Bus: a.Bus, Redis: counters, Prefix: cfg.RedisPrefix, Log: a.Log},
		Bus:     a.Bus,
		Queries: orderrm.Queries{Pool: a.Pool},
		Notify:  a.Notify,
	}
	worker := &batch.Worker{Pool: a.Pool, Notify: a.Notify, Work: orders.BatchItem, LogEnd: a.Bus.LogEnd, Log: a.Log}
	a.goRun(func() { worker.Run(ctx) })
	server.Auth = tokens
	server.Redis = a.Redis
	server.Pool = a.Pool
	a.goRun(func() {
		periodic.Run(ctx, time.Hour, func(ctx context.Context) {
			if err := podhttp.PruneIdempotencySeeds(ctx, a.Pool); err != nil && ctx.Err() == nil {
				a.Log.Warn("pruning idempotency seeds failed", "err", err)
			}
			if _, err := batch.Prune(ctx, a.Pool, batch.Retention); err != nil && ctx.Err() == nil {
				a.Log.Warn("pruning finished batches failed", "err", err)
			}
		})
	})
	server.Counters = counters
	server.RateLimit = podhttp.RateLimit{Rate: cfg.RateLimit, Burst: cfg.RateBurst, Prefix: cfg.RedisPrefix,
		AuthFailRate: cfg.AuthFailRate, AuthFailBurst: cfg.AuthFailBurst}
	server.Catalog = catalogrm.Queries{Pool: a.Pool}
	server.Config = configrm.Queries{Pool: a.Pool}
	server.Orders = orders
	server.Batches = &podhttp.Batches{Pool: a.Pool}
	server.Webhooks = &podhttp.Webhooks{Pool: a.Pool, Bus: a.WebhookBus, Box: a.Box, Guard: a.Guard, Streaks: a.Streaks,
		Deliveries: deliveryrm.Queries{Pool: a.Pool}, Producer: a.Producer, Log: a.Log, Naming: a.Naming}
	return server.App(), nil
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
		if a.stopPusher != nil {
			a.stopPusher()
		}
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
	for _, c := range a.closers {
		c()
	}
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
	if a.counters != nil {
		a.counters.Close()
	}
	if a.Redis != nil {
		a.Redis.Close()
	}
	if a.Work != nil {
		a.Work.Close()
	}
	if a.Pool != nil {
		a.Pool.Close()
	}
}
