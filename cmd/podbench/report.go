package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// result is the report of a run; --json prints it as is.
type result struct {
	Target        string  `json:"target"`
	PodsvcStarted bool    `json:"podsvc_started"`
	Replicas      int     `json:"replicas,omitempty"` // podsvc processes started here
	Kafka         string  `json:"kafka,omitempty"`    // of the podsvc started here: "embedded" or the brokers
	Mode          string  `json:"mode"`               // open (--rate) or closed (--concurrency)
	Rate          float64 `json:"rate"`
	Concurrency   int     `json:"concurrency"`
	DurationS     float64 `json:"duration_s"`
	WarmupS       float64 `json:"warmup_s"`
	Variant       string  `json:"variant"`

	Sent             int               `json:"sent"`
	LastAnswerS      float64           `json:"last_answer_after_end_s"` // how long after the end of the load the last POST was answered
	Accepted         int               `json:"accepted"`                // after the warmup
	AcceptedTotal    int               `json:"accepted_total"`          // warmup included: what the check covers
	AcceptedPerS     float64           `json:"accepted_per_s"`
	RejectedByStatus map[string]int    `json:"rejected_by_status"`
	RejectedSamples  map[string]string `json:"rejected_samples,omitempty"`
	NoAnswer         int               `json:"no_answer"`
	TransportErrors  map[string]int    `json:"transport_errors,omitempty"`

	PostP50Ms    float64 `json:"post_p50_ms"`
	PostP95Ms    float64 `json:"post_p95_ms"`
	PostP99Ms    float64 `json:"post_p99_ms"`
	PostMaxMs    float64 `json:"post_max_ms"`
	SendLagP99Ms float64 `json:"send_lag_p99_ms,omitempty"` // open loop: how late the generator itself sent

	VisibleP50Ms    float64 `json:"visible_p50_ms"`
	VisibleP99Ms    float64 `json:"visible_p99_ms"`
	VisibleMaxMs    float64 `json:"visible_max_ms"`
	VisibleSamples  int     `json:"visible_samples"`
	VisibleFailed   int64   `json:"visible_failed"`
	VisibleSkipped  int64   `json:"visible_skipped"`
	VisibleFirst404 int64   `json:"visible_first_get_404"` // read-your-writes misses: 404 on the first GET after a 201

	WebhookP50Ms      float64        `json:"webhook_p50_ms"`
	WebhookP95Ms      float64        `json:"webhook_p95_ms"`
	WebhookP99Ms      float64        `json:"webhook_p99_ms"`
	WebhookMaxMs      float64        `json:"webhook_max_ms"`
	PushedP50Ms       float64        `json:"pushed_p50_ms,omitempty"` // send → status update to SUCCESS/FAILED
	PushedP99Ms       float64        `json:"pushed_p99_ms,omitempty"`
	Deliveries        int            `json:"deliveries"` // distinct events of this run's orders
	DeliveriesPerS    float64        `json:"deliveries_per_s"`
	DeliveriesByTopic map[string]int `json:"deliveries_by_topic"`
	Requests          int64          `json:"webhook_requests"` // verified requests, repeats included
	ForeignEvents     int            `json:"foreign_events,omitempty"`

	ProjectionLagMax    *float64           `json:"projection_lag_max"` // records; null when podsvc exports no pod_consumer_lag
	ProjectionLagSource string             `json:"projection_lag_source"`
	ConsumerLagMax      map[string]float64 `json:"consumer_lag_max,omitempty"`

	CPUCores      *float64 `json:"cpu_cores"`
	RSSMiB        *float64 `json:"rss_mib"`
	HostBusyCores float64  `json:"host_busy_cores"`
	HostCores     int      `json:"host_cores"`
	PodbenchCores float64  `json:"podbench_cores"`

	costReport // per accepted order, over the whole run (flattened into the JSON)

	PgInsertPerS     *float64 `json:"pg_insert_per_s"`
	HTTPBaselinePerS *float64 `json:"http_baseline_per_s"`
	RatioPg          *float64 `json:"ratio_pg"`
	RatioHTTP        *float64 `json:"ratio_http"`

	Lost                  int      `json:"lost"`
	MissingFromReadModel  int      `json:"missing_from_read_model"`
	MissingCreatedWebhook int      `json:"missing_created_webhook"`
	MissingPushedWebhook  int      `json:"missing_pushed_webhook,omitempty"`
	Duplicated            int      `json:"duplicated"`
	DuplicateDeliveries   int      `json:"duplicate_deliveries"`
	DuplicateExamples     []string `json:"duplicate_examples,omitempty"`
	RedeliveredAfterCrash int      `json:"redelivered_after_crash"`
	RedeliveredWindowMs   float64  `json:"redelivered_window_ms,omitempty"` // the earliest first arrival of those, before the kill
	RedeliveredExamples   []string `json:"redelivered_examples,omitempty"`
	Unknown               int      `json:"unknown"`
	UnknownCreated        int      `json:"unknown_created"`
	RejectedButCreated    int      `json:"rejected_but_created"`
	Recorded503           int      `json:"recorded_503"`             // 503 "recorded but not decided in time; it will still be applied"
	Recorded503NotApplied int      `json:"recorded_503_not_applied"` // … whose order.created never arrived
	CheckedBy             string   `json:"checked_by"`

	BadSignature      int64 `json:"bad_signature"`
	StaleTimestamp    int64 `json:"stale_timestamp"`
	Undecodable       int64 `json:"undecodable"`
	IDMismatch        int64 `json:"id_header_mismatch"`
	FollowedRedirects int64 `json:"followed_redirects"`

	Fault        *faultResult `json:"fault,omitempty"`
	BadReceivers []badReport  `json:"bad_receivers,omitempty"`

	Failures []string `json:"failures"`
	OK       bool     `json:"ok"`
}

// faultResult is the fault's timeline and the load's results around it.
type faultResult struct {
	Name           string                 `json:"name,omitempty"`
	AtS            float64                `json:"at_s"`
	RecoveredS     float64                `json:"recovered_s"`
	Kill9          bool                   `json:"kill9,omitempty"`
	Cmd            string                 `json:"cmd,omitempty"`
	RecoverCmd     string                 `json:"recover_cmd,omitempty"`
	Phases         map[string]phaseCounts `json:"phases"`
	AcceptedPerS   map[string]float64     `json:"accepted_per_s"`
	Errors         []string               `json:"errors,omitempty"`
	RestartSeconds []float64              `json:"restart_s,omitempty"` // kill → ready again
}

// runData is everything a report is built from.
type runData struct {
	o        options
	target   string
	started  bool
	v        variant
	led      *ledger
	st       *loadStats
	vis      *visibility
	rcv      *receiver
	lag      lagReport
	proc     procReport
	faults   faultReport
	verdict  verdict
	pgBase   *float64
	httpBase *float64
	bad      []badReport
	warmEnd  time.Time
	end      time.Time
	cost     *costMeter
}

func round(x float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(x*p) / p
}

func ptr(x float64) *float64 { return &x }

func buildResult(d runData) result {
	o := d.o
	r := result{Target: d.target, PodsvcStarted: d.started, Rate: o.rate, Concurrency: o.concurrency,
		DurationS: o.duration.Seconds(), WarmupS: o.warmup.Seconds(),
		Variant: fmt.Sprintf("%s (%s) of store %s", d.v.SKU, d.v.Category, d.v.StoreName)}
	if d.started {
		r.Replicas, r.Kafka = o.replicas, "embedded"
		if o.kafkaBrokers != "" {
			r.Kafka = o.kafkaBrokers
		}
	}
	r.Mode = "closed"
	if o.openLoop() {
		r.Mode = "open"
	}

	// Orders.
	var webhook, pushed latencies
	var warmDur = d.end.Sub(d.warmEnd)
	inWindowAcc := 0
	var lastAnswer time.Time
	d.led.each(func(x *order) {
		if !x.warmup {
			r.Sent++
		}
		if x.done.After(lastAnswer) {
			lastAnswer = x.done
		}
		if x.outcome != accepted {
			return
		}
		if !x.done.Before(d.warmEnd) && !x.done.After(d.end) {
			inWindowAcc++ // answered 201 within the measured window
		}
		r.AcceptedTotal++
		if x.warmup {
			return
		}
		r.Accepted++
		if got, ok := d.rcv.arrivalsOf(x.seq); ok {
			if !got.created.IsZero() {
				webhook.add(got.created.Sub(x.sent))
			}
			if !got.terminal.IsZero() {
				pushed.add(got.terminal.Sub(x.sent))
			}
		}
	})
	r.AcceptedPerS = round(float64(inWindowAcc)/warmDur.Seconds(), 1)
	r.LastAnswerS = round(max(0, lastAnswer.Sub(d.end).Seconds()), 2)
	d.st.mu.Lock()
	r.RejectedByStatus = map[string]int{}
	r.RejectedSamples = map[string]string{}
	for st, n := range d.st.byStatus {
		r.RejectedByStatus[strconv.Itoa(st)] = n
		r.RejectedSamples[strconv.Itoa(st)] = truncate(d.st.samples[st], 300)
	}
	r.TransportErrors = map[string]int{}
	for k, n := range d.st.transport {
		r.TransportErrors[k] = n
	}
	phases := d.st.phases
	d.st.mu.Unlock()
	r.NoAnswer = int(d.st.noAnswer.Load())

	ps := d.st.post.summary()
	r.PostP50Ms, r.PostP95Ms, r.PostP99Ms, r.PostMaxMs = round(ps.P50, 2), round(ps.P95, 2), round(ps.P99, 2), round(ps.Max, 2)
	if o.openLoop() {
		r.SendLagP99Ms = round(d.st.sendLag.summary().P99, 2)
	}
	vs := d.vis.lat.summary()
	r.VisibleP50Ms, r.VisibleP99Ms, r.VisibleMaxMs, r.VisibleSamples = round(vs.P50, 2), round(vs.P99, 2), round(vs.Max, 2), vs.N
	r.VisibleFailed, r.VisibleSkipped, r.VisibleFirst404 = d.vis.failed.Load(), d.vis.skipped.Load(), d.vis.first404.Load()
	ws := webhook.summary()
	r.WebhookP50Ms, r.WebhookP95Ms, r.WebhookP99Ms, r.WebhookMaxMs = round(ws.P50, 2), round(ws.P95, 2), round(ws.P99, 2), round(ws.Max, 2)
	if s := pushed.summary(); s.N > 0 {
		r.PushedP50Ms, r.PushedP99Ms = round(s.P50, 2), round(s.P99, 2)
	}

	// Webhooks.
	d.rcv.mu.Lock()
	r.DeliveriesByTopic = map[string]int{}
	inWindow := 0
	for _, ev := range d.rcv.events {
		if ev.seq < 0 {
			continue
		}
		r.Deliveries++
		r.DeliveriesByTopic[ev.topic]++
		if a := ev.arrivals[0]; !a.Before(d.warmEnd) && a.Before(d.end) {
			inWindow++
		}
	}
	r.ForeignEvents = d.rcv.foreign
	d.rcv.mu.Unlock()
	r.DeliveriesPerS = round(float64(inWindow)/warmDur.Seconds(), 1)
	r.Requests = d.rcv.total.Load()
	r.BadSignature, r.StaleTimestamp, r.Undecodable = d.rcv.badSig.Load(), d.rcv.stale.Load(), d.rcv.undecodable.Load()
	r.IDMismatch, r.FollowedRedirects = d.rcv.idMismatch.Load(), d.rcv.followed.Load()

	// Lag, CPU, memory.
	if d.lag.Found {
		r.ProjectionLagSource = "metrics:" + lagMetric + "{group=\"" + o.lagGroup + "\"}"
		if v, ok := d.lag.MaxLag[o.lagGroup]; ok {
			r.ProjectionLagMax = ptr(v)
		}
		r.ConsumerLagMax = d.lag.MaxLag
	} else {
		r.ProjectionLagSource = "create_to_visible (podsvc exports no " + lagMetric + "; see visible_*_ms)"
	}
	if d.proc.Sampled {
		r.CPUCores, r.RSSMiB = ptr(round(d.proc.CPUCores, 2)), ptr(round(d.proc.RSSMiB, 1))
	}
	r.HostBusyCores, r.HostCores, r.PodbenchCores = round(d.proc.HostBusyCores, 2), d.proc.HostCores, round(d.proc.SelfCores, 2)

	// Baselines.
	r.PgInsertPerS, r.HTTPBaselinePerS = d.pgBase, d.httpBase
	if d.pgBase != nil && *d.pgBase > 0 {
		r.RatioPg = ptr(round(r.AcceptedPerS / *d.pgBase, 4))
	}
	if d.httpBase != nil && *d.httpBase > 0 {
		r.RatioHTTP = ptr(round(r.AcceptedPerS / *d.httpBase, 4))
	}

	// The check.
	v := d.verdict
	r.Lost, r.MissingFromReadModel, r.MissingCreatedWebhook, r.MissingPushedWebhook = v.Lost, v.MissingFromReadModel, v.MissingCreatedWebhook, v.MissingPushedWebhook
	r.Duplicated, r.DuplicateDeliveries, r.DuplicateExamples = v.Duplicated, v.DuplicateDeliveries, v.DupExamples
	r.RedeliveredAfterCrash, r.RedeliveredWindowMs, r.RedeliveredExamples = v.RedeliveredAfterCrash, round(v.RedeliveredWindowMs, 1), v.RedeliveredExamples
	r.Unknown, r.UnknownCreated, r.RejectedButCreated, r.CheckedBy = v.Unknown, v.UnknownCreated, v.RejectedButCreated, v.CheckedBy
	r.Recorded503, r.Recorded503NotApplied = v.Recorded, v.RecordedNotApplied

	// The fault.
	if o.fault.active() {
		f := &faultResult{Name: o.fault.name, AtS: round(d.faults.StartS, 2), RecoveredS: round(d.faults.EndS, 2), Kill9: o.fault.kill9,
			Cmd: o.fault.cmd, RecoverCmd: o.fault.recoverCmd, Phases: map[string]phaseCounts{}, AcceptedPerS: map[string]float64{}}
		total := warmDur.Seconds()
		bounds := map[phase][2]float64{phaseBefore: {0, d.faults.StartS}, phaseDuring: {d.faults.StartS, d.faults.EndS}, phaseAfter: {d.faults.EndS, total}}
		if d.faults.EndS == 0 { // never recovered within the load
			bounds[phaseDuring] = [2]float64{d.faults.StartS, total}
			bounds[phaseAfter] = [2]float64{total, total}
		}
		for p := phaseBefore; p <= phaseAfter; p++ {
			f.Phases[p.String()] = phases[p]
			if b := bounds[p]; b[1] > b[0] {
				f.AcceptedPerS[p.String()] = round(float64(phases[p].Accepted)/(b[1]-b[0]), 1)
			}
		}
		for _, e := range d.faults.Errs {
			f.Errors = append(f.Errors, e.Error())
		}
		for i, c := range d.faults.Crashes {
			if i < len(d.faults.Restarts) {
				f.RestartSeconds = append(f.RestartSeconds, round(d.faults.Restarts[i].Sub(c.kill).Seconds(), 2))
			}
		}
		r.Fault = f
	}
	r.BadReceivers = d.bad

	r.costReport = d.cost.report(r.AcceptedTotal)
	r.Failures = failures(o, r, v)
	r.OK = len(r.Failures) == 0
	return r
}

// failures lists why the run fails; empty means it passed.
func failures(o options, r result, v verdict) []string {
	f := []string{}
	add := func(format string, args ...any) { f = append(f, fmt.Sprintf(format, args...)) }
	if r.AcceptedTotal == 0 {
		add("no order was accepted")
	}
	if r.Lost > 0 {
		add("lost %d accepted orders (%d missing from the read model, %d without order.created)", r.Lost, r.MissingFromReadModel, r.MissingCreatedWebhook)
	}
	if r.Recorded503NotApplied > 0 {
		add("%d orders answered 503 \"recorded … will still be applied\" never got order.created", r.Recorded503NotApplied)
	}
	if r.Duplicated > 0 {
		add("%d event ids delivered again after a 2xx", r.Duplicated)
	}
	if o.expect == "pushed" && r.MissingPushedWebhook > 0 {
		add("%d accepted orders got no status update to SUCCESS or FAILED", r.MissingPushedWebhook)
	}
	for st, n := range r.RejectedByStatus {
		if code, _ := strconv.Atoi(st); code >= 500 && code != 503 {
			add("the API answered %s %d times (only 503 is expected under faults)", st, n)
		}
	}
	if v.CheckErr != "" {
		add("read model not checked: %s", v.CheckErr)
	}
	if r.BadSignature > 0 || r.StaleTimestamp > 0 || r.Undecodable > 0 {
		add("webhook requests failed verification: %d bad signature, %d stale timestamp, %d undecodable", r.BadSignature, r.StaleTimestamp, r.Undecodable)
	}
	if r.IDMismatch > 0 {
		add("%d webhook requests had an X-Webhook-Id other than the envelope id", r.IDMismatch)
	}
	if r.FollowedRedirects > 0 {
		add("the service followed a webhook redirect %d times", r.FollowedRedirects)
	}
	if lim := o.maxWebhookP99; lim > 0 && r.WebhookP99Ms > float64(lim)/float64(time.Millisecond) {
		add("create→webhook p99 %.1f ms is above --max-webhook-p99 %s", r.WebhookP99Ms, lim)
	}
	if r.Fault != nil {
		if len(r.Fault.Errors) > 0 {
			add("the fault did not go as planned: %v", r.Fault.Errors)
		}
		if o.requireAcceptedDuringFault && r.Fault.Phases["during"].Accepted == 0 {
			add("no order sent during the fault was accepted")
		}
		if o.requireAcceptedAfterFault && r.Fault.Phases["after"].Accepted == 0 {
			add("no order was accepted after the recovery")
		}
	}
	slices.Sort(f)
	return f
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
