package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/go-json-experiment/json/v1"
)

// loadStats are the live counters of the load, read by the progress line
// and the report.
type loadStats struct {
	sent     atomic.Int64
	accepted atomic.Int64 // 201s, warmup included
	other    atomic.Int64 // other statuses
	noAnswer atomic.Int64 // no answer or refused
	inflight atomic.Int64

	post    latencies // 201s after the warmup, from the intended send time
	sendLag latencies // open loop: actual minus intended send time

	mu        sync.Mutex
	byStatus  map[int]int    // every non-201 status, warmup included
	samples   map[int]string // the first body answered with each such status
	transport map[string]int // transport errors by kind
	phases    [3]phaseCounts
}

// phaseCounts are the results of the orders sent in one fault phase
// (warmup excluded).
type phaseCounts struct {
	Sent     int         `json:"sent"`
	Accepted int         `json:"accepted"`
	NoAnswer int         `json:"no_answer"`
	ByStatus map[int]int `json:"by_status,omitempty"`
}

func newLoadStats() *loadStats {
	return &loadStats{byStatus: map[int]int{}, samples: map[int]string{}, transport: map[string]int{}}
}

// generator sends the orders.
type generator struct {
	o       options
	api     *api
	posts   []string // base URLs the orders go to, in turn
	next    atomic.Uint64
	led     *ledger
	body    func(ref string) []byte // the order request for a reference
	st      *loadStats
	vis     *visibility
	faults  *faultRun
	warmEnd time.Time
}

// run sends orders from start until end (warmup included) and returns when
// every POST has its answer.
func (g *generator) run(ctx context.Context, start, end time.Time) {
	if g.o.openLoop() {
		g.openLoop(ctx, start, end)
	} else {
		g.closedLoop(ctx, end)
	}
}

// openLoop fixes send i at start + i/rate. When --max-inflight POSTs are
// outstanding the next send waits, but its latency still counts from its
// intended time, so a stall shows in the percentiles.
func (g *generator) openLoop(ctx context.Context, start, end time.Time) {
	sem := make(chan struct{}, g.o.maxInFlight)
	var wg sync.WaitGroup
	interval := float64(time.Second) / g.o.rate
loop:
	for i := 0; ; i++ {
		at := start.Add(time.Duration(float64(i) * interval))
		if !at.Before(end) || !sleepUntil(ctx, at) {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			g.send(ctx, at)
		}()
	}
	wg.Wait()
}

func (g *generator) closedLoop(ctx context.Context, end time.Time) {
	var wg sync.WaitGroup
	for range g.o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				now := time.Now()
				if !now.Before(end) {
					return
				}
				g.send(ctx, now)
			}
		}()
	}
	wg.Wait()
}

// send POSTs one order intended at scheduled and records the result.
func (g *generator) send(ctx context.Context, scheduled time.Time) {
	rec := g.led.add()
	body := g.body(rec.ref)
	rec.warmup = scheduled.Before(g.warmEnd)
	rec.phase = g.faults.phaseNow()
	rec.scheduled = scheduled
	g.st.sent.Add(1)
	g.st.inflight.Add(1)
	rec.sent = time.Now()
	base := g.posts[(g.next.Add(1)-1)%uint64(len(g.posts))]
	status, raw, err := g.api.doOn(ctx, base, http.MethodPost, "/v1/orders/pod", body)
	rec.done = time.Now()
	g.st.inflight.Add(-1)
	rec.status = status
	switch {
	case err != nil:
		rec.outcome = classify(err)
		rec.errText = err.Error()
		g.st.noAnswer.Add(1)
	case status == http.StatusCreated:
		rec.outcome = accepted
		var res struct {
			OrderID string `json:"order_id"`
		}
		_ = json.Unmarshal(raw, &res)
		rec.orderID = res.OrderID
		n := g.st.accepted.Add(1)
		if !rec.warmup {
			g.st.post.add(rec.latency())
		}
		g.vis.offer(n, rec.orderID, rec.sent)
	default:
		rec.outcome = rejected
		// podsvc's 503 after the 10 s decision wait says the command was
		// recorded and will still be applied: such an order must appear.
		rec.recorded = status == http.StatusServiceUnavailable && strings.Contains(string(raw), "recorded but not decided")
		g.st.other.Add(1)
	}
	if g.o.openLoop() && !rec.warmup {
		g.st.sendLag.add(rec.sent.Sub(scheduled))
	}

	g.st.mu.Lock()
	defer g.st.mu.Unlock()
	if rec.outcome == rejected {
		g.st.byStatus[status]++
		if _, ok := g.st.samples[status]; !ok {
			g.st.samples[status] = strings.TrimSpace(string(raw))
		}
	}
	if err != nil {
		g.st.transport[errKind(err)]++
	}
	if rec.warmup {
		return
	}
	pc := &g.st.phases[rec.phase]
	pc.Sent++
	switch rec.outcome {
	case accepted:
		pc.Accepted++
	case noAnswer, refused:
		pc.NoAnswer++
	case rejected:
		if pc.ByStatus == nil {
			pc.ByStatus = map[int]int{}
		}
		pc.ByStatus[status]++
	}
}

// errKind names a transport error briefly for the report.
func errKind(err error) string {
	s := err.Error()
	for _, k := range []string{"connection refused", "connection reset", "EOF", "closed connection", "timeout", "broken pipe"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}
