package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// options are podbench's flags.
type options struct {
	rate        float64 // orders per second; 0 = closed loop
	concurrency int     // closed-loop workers; also the baselines' concurrency
	maxInFlight int     // open loop: most POSTs outstanding at once
	duration    time.Duration
	warmup      time.Duration
	timeout     time.Duration // per request

	target    string // running podsvc; empty = start one
	pid       int    // podsvc process to sample when --target is given
	token     string
	category  string // preferred variant category
	roles     string // POD_ROLES of a started podsvc
	podsvcBin string // prebuilt podsvc; empty = go build
	podsvcEnv []string
	keep      bool

	kafkaBrokers string // KAFKA_BROKERS of the podsvc started here; empty = its embedded broker
	replicas     int    // podsvc processes started here, sharing database, Redis and Kafka

	databaseURL string
	redisURL    string

	receiverAddr string
	badReceivers []string
	badSleep     time.Duration

	visibleEvery   int // poll every k-th accepted order; 0 = auto
	visibleWorkers int

	expect       string // created | pushed
	drainTimeout time.Duration
	settle       time.Duration
	check        string // db | api
	lagGroup     string

	baseline         bool
	baselineDuration time.Duration

	fault                      faultPlan
	requireAcceptedDuringFault bool
	requireAcceptedAfterFault  bool
	maxWebhookP99              time.Duration

	jsonOut    bool
	jsonFile   string
	cpuProfile string
}

var knownBadReceivers = []string{"timeout", "reset", "redirect"}

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("podbench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: podbench [flags]\n\n"+
			"Drives POST /v1/orders/pod of a podsvc (started here unless --target is given),\n"+
			"receives its webhooks, and checks that nothing accepted was lost or delivered twice.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.Float64Var(&o.rate, "rate", 0, "orders per second, open loop (send times fixed by the rate); 0 = as fast as --concurrency workers go")
	fs.IntVar(&o.concurrency, "concurrency", 16, "workers when --rate is 0; also the concurrency of the baselines")
	fs.IntVar(&o.maxInFlight, "max-inflight", 2048, "open loop: most POSTs outstanding at once (the schedule still counts from the intended send time)")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "measured load duration")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "load before the measured duration (checked for loss, left out of the figures)")
	fs.DurationVar(&o.timeout, "request-timeout", 30*time.Second, "timeout of one API request")

	fs.StringVar(&o.target, "target", "", "base URL of a running podsvc; empty = build and start one")
	fs.IntVar(&o.pid, "pid", 0, "with --target: podsvc process id to sample CPU and RSS of")
	fs.StringVar(&o.token, "token", "demo-token", "API bearer token")
	fs.StringVar(&o.category, "category", "tshirt", "preferred product category of the ordered variant")
	fs.StringVar(&o.roles, "roles", "all", "POD_ROLES of the podsvc started here")
	fs.StringVar(&o.podsvcBin, "podsvc-bin", envOr("PODSVC_BIN", ""), "prebuilt podsvc binary (default: go build ./cmd/podsvc into a temp dir)")
	fs.Var((*listFlag)(&o.podsvcEnv), "podsvc-env", "KEY=VALUE added to the environment of the podsvc started here (repeatable)")
	fs.BoolVar(&o.keep, "keep", false, "keep the started podsvc's database, data dir, Redis keys and Kafka topics")
	fs.StringVar(&o.kafkaBrokers, "kafka-brokers", envOr("KAFKA_BROKERS", ""),
		"Kafka cluster of the podsvc started here (host:port,…); its topics and groups get a prefix of this run's own, deleted afterwards unless --keep. Empty = podsvc's embedded broker. With --target: the target's cluster, read for the records-per-order cost")
	fs.IntVar(&o.replicas, "replicas", 1, "podsvc processes to start, each with --roles, sharing the database, Redis and Kafka (more than 1 needs --kafka-brokers); POSTs go to them in turn and --fault-kill9 kills the last")

	fs.StringVar(&o.databaseURL, "database-url", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/pod?sslmode=disable"),
		"Postgres of the read-model check and the baseline; a started podsvc gets a fresh database on this server")
	fs.StringVar(&o.redisURL, "redis-url", envOr("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis of the podsvc started here")

	fs.StringVar(&o.receiverAddr, "receiver-addr", "127.0.0.1:0", "listen address of the webhook receiver; with a fixed port P, bad receivers take P+1, P+2, …")
	bad := fs.String("bad-receivers", "", "extra failing webhook endpoints: comma list of timeout, reset, redirect")
	fs.DurationVar(&o.badSleep, "bad-timeout-sleep", 30*time.Second, "how long the timeout receiver holds a request (set it above POD_WEBHOOK_TIMEOUT)")

	fs.IntVar(&o.visibleEvery, "visible-every", 0, "poll GET /v1/orders/pod/{id} for every k-th accepted order; 0 = about 100 polls/s (open loop) or every 5th (closed loop)")
	fs.IntVar(&o.visibleWorkers, "visible-workers", 8, "most visibility polls at once (a sample finding them busy is skipped)")

	fs.StringVar(&o.expect, "expect", "created", "webhooks each accepted order must produce before the drain ends: created (order.created) or pushed (also the status update to SUCCESS or FAILED)")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 60*time.Second, "how long to wait after the load for the expected webhooks")
	fs.DurationVar(&o.settle, "settle", 2*time.Second, "quiet time after the drain to catch late duplicates")
	fs.StringVar(&o.check, "check", "db", "how the read model is checked: db (one query on the orders table; falls back to api) or api (paged GET /v1/orders/pod)")
	fs.StringVar(&o.lagGroup, "lag-group", "projections.orders", "consumer group whose pod_consumer_lag is reported as projection lag")

	fs.BoolVar(&o.baseline, "baseline", true, "measure the Postgres INSERT and bare Fiber baselines first")
	fs.DurationVar(&o.baselineDuration, "baseline-duration", 3*time.Second, "duration of each baseline")

	fs.DurationVar(&o.fault.at, "fault-at", 0, "when the fault starts, counted from the end of the warmup (0 = no fault)")
	fs.BoolVar(&o.fault.kill9, "fault-kill9", false, "fault: SIGKILL the podsvc started here, restart it on the same data dir and database after --fault-duration")
	fs.StringVar(&o.fault.cmd, "fault-cmd", "", "fault: shell command run at --fault-at")
	fs.DurationVar(&o.fault.duration, "fault-duration", 0, "wait between the fault and the recovery (restart, --recover-cmd)")
	fs.StringVar(&o.fault.name, "fault-name", "", "short name of the fault for the report (default: the command)")
	fs.StringVar(&o.fault.recoverCmd, "recover-cmd", "", "shell command run --fault-duration after the fault")
	fs.BoolVar(&o.requireAcceptedDuringFault, "require-accepted-during-fault", false, "fail unless some orders sent during the fault were accepted")
	fs.BoolVar(&o.requireAcceptedAfterFault, "require-accepted-after-fault", false, "fail unless orders were accepted after the recovery")

	fs.DurationVar(&o.maxWebhookP99, "max-webhook-p99", 0, "fail when the good receiver's create→webhook p99 exceeds this (0 = no limit)")

	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object instead of the table")
	fs.StringVar(&o.jsonFile, "json-file", "", "also write the JSON report to this file")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write podbench's own CPU profile (the load it generates and the webhooks it receives) to this file")

	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *bad != "" {
		for _, b := range strings.Split(*bad, ",") {
			b = strings.TrimSpace(b)
			if !slices.Contains(knownBadReceivers, b) {
				return o, fmt.Errorf("--bad-receivers: unknown %q (known: %s)", b, strings.Join(knownBadReceivers, ", "))
			}
			if !slices.Contains(o.badReceivers, b) {
				o.badReceivers = append(o.badReceivers, b)
			}
		}
	}
	o.target = strings.TrimRight(o.target, "/")
	return o, o.validate()
}

func (o options) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.rate < 0 {
		bad("--rate must not be negative")
	}
	if o.concurrency < 1 {
		bad("--concurrency must be at least 1")
	}
	if o.maxInFlight < 1 {
		bad("--max-inflight must be at least 1")
	}
	if o.duration <= 0 {
		bad("--duration must be positive")
	}
	if o.warmup < 0 || o.drainTimeout < 0 || o.settle < 0 || o.fault.duration < 0 {
		bad("durations must not be negative")
	}
	if o.expect != "created" && o.expect != "pushed" {
		bad("--expect must be created or pushed")
	}
	if o.check != "db" && o.check != "api" {
		bad("--check must be db or api")
	}
	if o.pid != 0 && o.target == "" {
		bad("--pid goes with --target (a podsvc started here is sampled anyway)")
	}
	if o.replicas < 1 {
		bad("--replicas must be at least 1")
	}
	if o.replicas > 1 && o.kafkaBrokers == "" {
		bad("--replicas %d needs --kafka-brokers: the embedded broker lives inside one podsvc process", o.replicas)
	}
	if o.target != "" && o.replicas > 1 {
		bad("--replicas starts podsvc processes here; it does not go with --target")
	}
	if o.fault.kill9 && o.target != "" {
		bad("--fault-kill9 needs the podsvc started here (no --target): podbench restarts it")
	}
	if o.fault.active() && o.fault.at <= 0 {
		bad("--fault-at must be positive when a fault is given")
	}
	if o.fault.at > 0 && !o.fault.active() {
		bad("--fault-at needs --fault-kill9 or --fault-cmd")
	}
	if o.fault.at > 0 && o.fault.at >= o.duration {
		bad("--fault-at must fall inside --duration")
	}
	for _, kv := range o.podsvcEnv {
		if !strings.Contains(kv, "=") {
			bad("--podsvc-env %q is not KEY=VALUE", kv)
		}
	}
	if o.target != "" && len(o.podsvcEnv) > 0 {
		bad("--podsvc-env applies only to the podsvc started here (no --target)")
	}
	return errors.Join(errs...)
}

// openLoop reports whether send times follow the rate.
func (o options) openLoop() bool { return o.rate > 0 }
