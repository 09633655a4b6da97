// Command podsvc is the print-on-demand order service: every role (api,
// decider, projector, pusher, delivery) in one binary, configured from the
// environment (see README). With no KAFKA_BROKERS it runs an embedded broker.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/printpod/pod/cmd/podsvc/app"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/logging"
)

// Garbage collection defaults, unless GOGC or GOMEMLIMIT say otherwise:
// collect when the heap has grown by 400% rather than 100%, and more often
// only as it nears 2 GiB. At 1,000 orders/s the collector took 11% of
// podsvc's CPU at Go's default; the live heap is tens of megabytes, so the
// larger growth costs memory the machine has and saves CPU it lacks.
const (
	defaultGCPercent   = 400
	defaultMemoryLimit = 2 << 30
)

func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
}

func main() {
	tuneGC()
	cfg, err := config.FromEnv(nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "podsvc: configuration:\n%v\n", err)
		os.Exit(2)
	}
	log := logging.New(os.Stderr, cfg.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	a, err := app.Start(ctx, cfg, log)
	if err != nil {
		log.Error("start failed", "err", err)
		os.Exit(1)
	}
	log.Info("podsvc running", "addr", "http://"+a.Addr(), "roles", cfg.Roles, "env", cfg.Env, "kafka", a.Brokers)
	if !cfg.Production() && cfg.DemoToken != "" && cfg.HasRole(config.RoleAPI) {
		fmt.Fprintf(os.Stderr, "\n  podsvc is listening on http://%s\n  demo token: %s\n  try: curl -H 'Authorization: Bearer %s' http://%s/v1/stores\n\n",
			a.Addr(), cfg.DemoToken, cfg.DemoToken, a.Addr())
	}
	err = a.Wait(ctx)
	log.Info("shutting down")
	a.Stop()
	if err != nil {
		log.Error("stopped with error", "err", err)
		os.Exit(1)
	}
}
