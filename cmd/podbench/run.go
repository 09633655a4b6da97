package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
)

// run carries out one benchmark and returns the exit code.
func run(ctx context.Context, o options) int {
	var b [4]byte
	_, _ = rand.Read(b[:])
	runID := hex.EncodeToString(b[:])
	led := newLedger(runID)
	if o.cpuProfile != "" {
		stop, err := profileCPU(o.cpuProfile)
		if err != nil {
			say("--cpuprofile: %v", err)
			return exitSetup
		}
		defer stop()
	}

	// Receivers first: a started podsvc must allow their addresses.
	rcv, err := startReceiver(o.receiverAddr, led)
	if err != nil {
		say("webhook receiver: %v", err)
		return exitSetup
	}
	defer rcv.close()
	var bads []*badReceiver
	allow := []string{rcv.addr}
	for i, kind := range o.badReceivers {
		br, err := startBadReceiver(kind, badAddr(o.receiverAddr, i), "http://"+rcv.addr, o.badSleep)
		if err != nil {
			say("%v", err)
			return exitSetup
		}
		defer br.close()
		bads = append(bads, br)
		allow = append(allow, br.addr)
	}

	target, dbURL := o.target, o.databaseURL
	var svcs []*podsvc // started here: the first, then its replicas
	code := exitSetup  // what the deferred clean-up sees
	if target == "" {
		plat, err := startPlatform()
		if err != nil {
			say("store platform: %v", err)
			return exitSetup
		}
		defer plat.close()
		svc, err := newPodsvc(ctx, o, runID, allow, plat.url)
		if svc != nil {
			svcs = append(svcs, svc)
			// Replicas first, the first podsvc last: it drops what they share.
			defer func() {
				for i := len(svcs) - 1; i >= 0; i-- {
					svcs[i].cleanup(o.keep, code != exitOK)
				}
			}()
		}
		if err != nil {
			say("%v", err)
			return exitSetup
		}
		for n := 2; n <= o.replicas; n++ {
			r, err := svc.newReplica(n)
			if err != nil {
				say("preparing %s: %v", fmt.Sprintf("podsvc-%d", n), err)
				return exitSetup
			}
			svcs = append(svcs, r)
		}
		target, dbURL = svc.base(), svc.dbURL
	}

	// Baselines, while the machine is otherwise quiet (before a podsvc of
	// our own starts).
	var pgBase, httpBase *float64
	if o.baseline {
		dummy := variant{VariantID: "00000000-0000-0000-0000-000000000000", Category: "tshirt"}
		say("baseline: plain INSERTs into Postgres, %d connections, %s", o.concurrency, o.baselineDuration)
		if v, err := pgBaseline(ctx, dbURL, runID, o.concurrency, o.baselineDuration, dummy.body("baseline")); err != nil {
			say("baseline: Postgres INSERTs failed: %v", err)
		} else {
			pgBase = ptr(round(v, 1))
		}
		say("baseline: bare Fiber handler on loopback, %d clients, %s", o.concurrency, o.baselineDuration)
		if v, err := httpBaseline(ctx, o.concurrency, o.baselineDuration, o.timeout, dummy); err != nil {
			say("baseline: HTTP failed: %v", err)
		} else {
			httpBase = ptr(round(v, 1))
		}
	}

	for _, svc := range svcs {
		say("starting %s on %s (database %s, Redis prefix %q, %s, log %s)", svc.name, svc.addr, svc.dbName, svc.redisPrefix, svc.kafkaDesc(), svc.logPath)
		t0 := time.Now()
		if err := svc.start(ctx); err != nil {
			say("%v", err)
			return exitSetup
		}
		say("%s ready after %s (pid %d)", svc.name, time.Since(t0).Round(time.Millisecond), svc.pid())
	}

	conns := o.concurrency
	if o.openLoop() {
		conns = o.maxInFlight
	}
	a := &api{base: target, token: o.token, hc: newHTTPClient(conns, o.timeout)}
	posts := []string{target} // where the orders go, in turn
	if len(svcs) > 1 {
		posts = posts[:0]
		for _, svc := range svcs {
			posts = append(posts, svc.base())
		}
	}
	v, err := awaitVariant(ctx, a, o.category, 60*time.Second)
	if err != nil {
		say("finding a variant to order: %v", err)
		return exitSetup
	}
	say("ordering variant %s (%s, %s) of store %q", v.VariantID, v.SKU, v.Category, v.StoreName)

	// Webhooks: the good receiver and the bad ones, every topic.
	tops := topics(ctx, a)
	var hookIDs []string
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, id := range hookIDs {
			_ = a.call(dctx, "DELETE", "/v1/me/webhooks/"+id, nil, nil)
		}
	}()
	good, err := registerWebhook(ctx, a, rcv.url, runID+" good", tops)
	if err != nil {
		say("registering the webhook: %v", err)
		return exitSetup
	}
	hookIDs = append(hookIDs, good.ID)
	rcv.secret.Store(&good.Secret)
	badIDs := map[*badReceiver]string{}
	for _, br := range bads {
		w, err := registerWebhook(ctx, a, br.url, runID+" "+br.kind, tops)
		if err != nil {
			say("registering the %s webhook: %v", br.kind, err)
			return exitSetup
		}
		hookIDs = append(hookIDs, w.ID)
		badIDs[br] = w.ID
	}
	say("webhooks registered for %v: %s%s", tops, rcv.url, badList(bads))

	// Samplers.
	sctx, stopSamplers := context.WithCancel(ctx)
	defer stopSamplers()
	pidsOf := func() []int { return []int{o.pid} }
	if len(svcs) > 0 {
		pidsOf = func() []int {
			pids := make([]int, len(svcs))
			for i, svc := range svcs {
				pids[i] = svc.pid()
			}
			return pids
		}
	}
	proc := newProcSampler(pidsOf)
	groupPrefix := ""
	if len(svcs) > 0 {
		groupPrefix = svcs[0].kafkaPrefix
	}
	lag := newLagScraper(target, groupPrefix)
	go proc.run(sctx)
	go lag.run(sctx)

	every := o.visibleEvery
	if every <= 0 {
		every = 5
		if o.openLoop() {
			every = max(1, int(math.Ceil(o.rate/100)))
		}
	}
	vis := startVisibility(ctx, a, every, o.visibleWorkers)

	// A fault kills (and the environment of its commands describes) the
	// last podsvc started here: with replicas, one that takes no part in
	// serving the checks' reads.
	var victim *podsvc
	var faultEnv []string
	if len(svcs) > 0 {
		victim = svcs[len(svcs)-1]
		faultEnv = append(faultEnv, "PODBENCH_TARGET="+victim.base(), "PODBENCH_DATA_DIR="+victim.dataDir,
			"PODBENCH_DATABASE_URL="+victim.dbURL, "PODBENCH_KAFKA_BROKERS="+strings.Join(victim.kafkaBrokers, ","),
			"PODBENCH_KAFKA_PREFIX="+victim.kafkaPrefix)
	}
	faults := newFaultRun(o.fault, victim, faultEnv)
	// The cost meter: podsvc's database, its Kafka and its processes.
	kafkaOf := func() ([]string, error) {
		return nil, errors.New("the target's Kafka is unknown: give --kafka-brokers")
	}
	kafkaPrefix := ""
	switch {
	case len(svcs) > 0 && len(svcs[0].kafkaBrokers) > 0:
		brokers := svcs[0].kafkaBrokers
		kafkaOf, kafkaPrefix = func() ([]string, error) { return brokers, nil }, svcs[0].kafkaPrefix
	case len(svcs) > 0:
		kafkaOf = embeddedBrokers(svcs[0].dataDir)
	case o.kafkaBrokers != "":
		brokers := strings.Split(o.kafkaBrokers, ",")
		kafkaOf = func() ([]string, error) { return brokers, nil }
	}
	cost := newCostMeter(dbURL, pidsOf, kafkaOf, kafkaPrefix, o.kafkaBrokers != "")
	go cost.cpu.run(sctx)
	cost.begin(ctx)

	st := newLoadStats()
	start := time.Now()
	warmEnd := start.Add(o.warmup)
	end := warmEnd.Add(o.duration)
	gen := &generator{o: o, api: a, posts: posts, led: led, body: v.bodies(), st: st, vis: vis, faults: faults, warmEnd: warmEnd}

	mode := "closed loop"
	if o.openLoop() {
		mode = "open loop"
	}
	say("load: %s, %s warmup + %s", mode, o.warmup, o.duration)
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); faults.run(ctx, warmEnd) }()
	go func() {
		defer bg.Done()
		if sleepUntil(ctx, warmEnd) {
			proc.begin()
			if sleepUntil(ctx, end) {
				proc.end()
			}
		}
	}()
	pctx, stopProgress := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); progress(pctx, st, rcv, faults, warmEnd, end) }()

	gen.run(ctx, start, end)
	bg.Wait() // the fault's recovery (a restart) is part of the run
	stopProgress()
	<-progressDone
	vis.stop()
	if ctx.Err() != nil {
		say("interrupted")
		return exitSetup
	}

	drain(ctx, led, rcv, o.expect, o.drainTimeout)
	cost.end(ctx)
	if o.settle > 0 {
		sleepUntil(ctx, time.Now().Add(o.settle))
	}
	stopSamplers()

	// The read model.
	var ids []string
	led.each(func(x *order) {
		if x.outcome == accepted {
			ids = append(ids, x.orderID)
		}
	})
	var present map[string]bool
	checkedBy, checkErr := o.check, ""
	if o.check == "db" {
		if present, err = inReadModelDB(ctx, dbURL, ids); err != nil {
			say("read model check over Postgres failed (%v); paging the API instead", err)
			checkedBy = "api"
		}
	}
	if present == nil {
		if present, err = inReadModelAPI(ctx, a, start.Add(-time.Minute)); err != nil {
			checkErr = err.Error()
			present = nil
		}
	}
	vd := check(led, rcv, present, o.expect, faults.report(warmEnd).Crashes)
	vd.CheckedBy, vd.CheckErr = checkedBy, checkErr

	var badReports []badReport
	for _, br := range bads {
		rep := br.report()
		if w, err := webhookState(ctx, a, badIDs[br]); err == nil {
			rep.IsActive, rep.ConsecutiveFailures, rep.DisabledReason = &w.IsActive, &w.ConsecutiveFailures, w.DisabledReason
		}
		badReports = append(badReports, rep)
	}

	res := buildResult(runData{o: o, target: target, started: len(svcs) > 0, v: v, led: led, st: st, vis: vis, rcv: rcv,
		lag: lag.report(), proc: proc.report(), faults: faults.report(warmEnd), verdict: vd, pgBase: pgBase, httpBase: httpBase,
		bad: badReports, warmEnd: warmEnd, end: end, cost: cost})
	if o.jsonOut {
		err = printJSON(os.Stdout, res)
	} else {
		err = printTable(os.Stdout, res)
	}
	if err != nil {
		say("writing the report: %v", err)
	}
	if o.jsonFile != "" {
		if err := writeJSONFile(o.jsonFile, res); err != nil {
			say("writing %s: %v", o.jsonFile, err)
		}
	}
	code = exitOK
	if !res.OK {
		code = exitFailed
	}
	return code
}

func badList(bads []*badReceiver) string {
	s := ""
	for _, b := range bads {
		s += ", " + b.url
	}
	return s
}

// profileCPU starts writing podbench's CPU profile to path; stop ends it.
func profileCPU(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			say("--cpuprofile: %v", err)
		}
	}, nil
}
