package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// faultPlan is one injected fault: at a time into the measured load,
// kill -9 the started podsvc and/or run a shell command; after duration,
// run the recovery command and/or start podsvc again.
type faultPlan struct {
	at         time.Duration
	duration   time.Duration
	kill9      bool
	cmd        string
	recoverCmd string
	name       string // for the report
}

func (f faultPlan) active() bool { return f.kill9 || f.cmd != "" }

// phase is where an order's send falls relative to the fault.
type phase uint8

const (
	phaseBefore phase = iota // no fault yet (or none planned)
	phaseDuring              // from the fault until the recovery is complete
	phaseAfter               // after the recovery
)

func (p phase) String() string {
	return [...]string{"before", "during", "after"}[p]
}

// faultRun carries out a plan and records when things happened.
type faultRun struct {
	plan  faultPlan
	svc   *podsvc // nil with --target
	env   []string
	state atomic.Uint32 // phase

	mu       sync.Mutex
	start    time.Time
	end      time.Time
	crashes  []crashSpan // kill -9s
	restarts []time.Time // podsvc ready again
	errs     []error
	done     chan struct{}
}

func newFaultRun(plan faultPlan, svc *podsvc, env []string) *faultRun {
	return &faultRun{plan: plan, svc: svc, env: env, done: make(chan struct{})}
}

func (f *faultRun) phaseNow() phase { return phase(f.state.Load()) }

func (f *faultRun) fail(err error) {
	say("fault: %v", err)
	f.mu.Lock()
	f.errs = append(f.errs, err)
	f.mu.Unlock()
}

// run waits until loadStart+at, injects the fault, waits, recovers.
func (f *faultRun) run(ctx context.Context, loadStart time.Time) {
	defer close(f.done)
	if !f.plan.active() {
		return
	}
	if !sleepUntil(ctx, loadStart.Add(f.plan.at)) {
		return
	}
	now := time.Now()
	f.mu.Lock()
	f.start = now
	f.mu.Unlock()
	f.state.Store(uint32(phaseDuring))
	if f.plan.kill9 {
		pid := f.svc.pid()
		say("fault: kill -9 podsvc (pid %d)", pid)
		if err := f.svc.kill9(); err != nil {
			f.fail(fmt.Errorf("kill -9: %w", err))
		}
		f.mu.Lock()
		f.crashes = append(f.crashes, crashSpan{kill: now})
		f.mu.Unlock()
	}
	if f.plan.cmd != "" {
		say("fault: running %q", f.plan.cmd)
		if err := f.shell(ctx, f.plan.cmd); err != nil {
			f.fail(fmt.Errorf("--fault-cmd: %w", err))
		}
	}
	if !sleepUntil(ctx, now.Add(f.plan.duration)) {
		return
	}
	if f.plan.recoverCmd != "" {
		say("fault: recovering: running %q", f.plan.recoverCmd)
		if err := f.shell(ctx, f.plan.recoverCmd); err != nil {
			f.fail(fmt.Errorf("--recover-cmd: %w", err))
		}
	}
	if f.plan.kill9 {
		say("fault: starting podsvc again on the same data dir and database")
		t0 := time.Now()
		f.mu.Lock()
		f.crashes[len(f.crashes)-1].resume = t0
		f.mu.Unlock()
		if err := f.svc.start(ctx); err != nil {
			f.fail(fmt.Errorf("restart podsvc: %w", err))
		} else {
			say("fault: podsvc ready again after %s (pid %d)", time.Since(t0).Round(time.Millisecond), f.svc.pid())
			f.mu.Lock()
			f.restarts = append(f.restarts, time.Now())
			f.mu.Unlock()
		}
	}
	f.mu.Lock()
	f.end = time.Now()
	f.mu.Unlock()
	f.state.Store(uint32(phaseAfter))
	say("fault: recovered %s after the fault began", time.Since(now).Round(time.Millisecond))
}

// shell runs a command with bash, its output on podbench's stderr, with
// the started podsvc's pid, address and data dir in the environment.
func (f *faultRun) shell(ctx context.Context, command string) error {
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), f.env...)
	if f.svc != nil {
		cmd.Env = append(cmd.Env, "PODBENCH_PODSVC_PID="+strconv.Itoa(f.svc.pid()))
	}
	return cmd.Run()
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// crashSpan is a kill -9 of podsvc and the moment it was started again
// (zero until then). What the killed process sent can still arrive until
// the restart (it was in flight when the process died); a repeat after the
// kill comes from the restarted process or from a replica that took over
// the killed one's work.
type crashSpan struct {
	kill, resume time.Time
}

// faultReport is the fault's timeline.
type faultReport struct {
	StartS   float64 // seconds into the measured load
	EndS     float64
	Crashes  []crashSpan
	Restarts []time.Time // podsvc ready again
	Errs     []error
}

func (f *faultRun) report(loadStart time.Time) faultReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := faultReport{Crashes: f.crashes, Restarts: f.restarts, Errs: f.errs}
	if !f.start.IsZero() {
		r.StartS = f.start.Sub(loadStart).Seconds()
	}
	if !f.end.IsZero() {
		r.EndS = f.end.Sub(loadStart).Seconds()
	}
	return r
}
