// Command podbench is a black-box load generator for podsvc. It POSTs valid
// orders over the public API (open loop at --rate, or closed loop with
// --concurrency workers), receives and verifies the webhooks they cause,
// samples podsvc's CPU, memory and consumer lag, measures two baselines
// (plain Postgres INSERTs and a bare Fiber handler), and ends with a check:
// every order answered 201 must be in the read model and its order.created
// webhook must have arrived, and no event id may arrive twice. It exits 1
// when that check fails.
//
// Without --target it builds podsvc, starts it on a fresh database, data
// directory and Redis prefix, and removes them afterwards (unless --keep).
// That podsvc pushes orders to a store platform podbench serves (the
// service's simulator), as the webhooks go to podbench's receiver: the
// outside world's work is not counted as the service's.
// Fault runs (--fault-at with --fault-kill9 or --fault-cmd) are scripted in
// deploy/faults/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // the run completed and its check failed
	exitSetup  = 2 // bad flags, or the run could not be set up
)

func main() {
	opts, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(exitOK)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "podbench:", err)
		os.Exit(exitSetup)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, opts))
}

// say writes one line of commentary to stderr (stdout carries the report).
func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "podbench: "+format+"\n", args...)
}
