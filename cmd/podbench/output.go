package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	json "github.com/go-json-experiment/json/v1"
)

func printJSON(w io.Writer, r result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

func writeJSONFile(path string, r result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := printJSON(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printTable writes the report for people.
func printTable(w io.Writer, r result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	opt := func(p *float64, format string) string {
		if p == nil {
			return "n/a"
		}
		return fmt.Sprintf(format, *p)
	}

	load := fmt.Sprintf("open loop at %.0f/s", r.Rate)
	if r.Mode == "closed" {
		load = fmt.Sprintf("closed loop, %d workers", r.Concurrency)
	}
	started := "running"
	if r.PodsvcStarted {
		started = "started by podbench, Kafka " + r.Kafka
		if r.Replicas > 1 {
			started = fmt.Sprintf("%d processes started by podbench, Kafka %s", r.Replicas, r.Kafka)
		}
	}
	fmt.Fprintf(w, "podbench: %s for %.0fs after %.0fs warmup, target %s (%s)\n", load, r.DurationS, r.WarmupS, r.Target, started)
	fmt.Fprintf(w, "orders of %s\n\n", r.Variant)

	row("accepted", "%.1f/s (201s answered during the measured window); %d of %d sent accepted, %d with the warmup",
		r.AcceptedPerS, r.Accepted, r.Sent, r.AcceptedTotal)
	if r.LastAnswerS > 1 {
		row("", "the last POST was answered %.1fs after the load's end: the service fell behind the offered rate", r.LastAnswerS)
	}
	row("not accepted", "%s; no answer %d%s", statusList(r.RejectedByStatus), r.NoAnswer, kindList(r.TransportErrors))
	row("POST latency", "p50 %.1f ms  p95 %.1f ms  p99 %.1f ms  max %.1f ms", r.PostP50Ms, r.PostP95Ms, r.PostP99Ms, r.PostMaxMs)
	if r.Mode == "open" {
		row("generator lag", "p99 %.2f ms (actual minus scheduled send)", r.SendLagP99Ms)
	}
	row("create→visible", "p50 %.1f ms  p99 %.1f ms  max %.1f ms  (%d sampled, %d failed, %d skipped; %d not found on the first GET)",
		r.VisibleP50Ms, r.VisibleP99Ms, r.VisibleMaxMs, r.VisibleSamples, r.VisibleFailed, r.VisibleSkipped, r.VisibleFirst404)
	row("create→webhook", "p50 %.1f ms  p95 %.1f ms  p99 %.1f ms  max %.1f ms  (order.created)", r.WebhookP50Ms, r.WebhookP95Ms, r.WebhookP99Ms, r.WebhookMaxMs)
	if r.PushedP50Ms > 0 {
		row("create→pushed", "p50 %.1f ms  p99 %.1f ms  (status update to SUCCESS/FAILED)", r.PushedP50Ms, r.PushedP99Ms)
	}
	row("webhooks", "%d events (%.1f/s during the load), %d requests;%s", r.Deliveries, r.DeliveriesPerS, r.Requests, kindList(r.DeliveriesByTopic))
	if r.ProjectionLagMax != nil {
		row("projection lag", "max %.0f records (%s)", *r.ProjectionLagMax, r.ProjectionLagSource)
	} else {
		row("projection lag", "%s", r.ProjectionLagSource)
	}
	row("podsvc", "cpu %s cores (mean)  rss %s MiB (peak)", opt(r.CPUCores, "%.2f"), opt(r.RSSMiB, "%.0f"))
	by := r.CPUMsPerOrderBy
	row("cost/order", "cpu %s ms (podsvc %.2f, postgres %.2f, redis %.2f%s)  over %d orders, first send to end of drain",
		opt(r.CPUMsPerOrder, "%.2f"), by[cpuPodsvc], by[cpuPostgres], by[cpuRedis], kafkaCPU(by), r.Orders)
	row("", "postgres %s commits, %s rows written, %s rows read  kafka %s records produced",
		opt(r.PgCommitsPerOrder, "%.2f"), opt(r.PgWrittenPerOrder, "%.1f"), opt(r.PgReadPerOrder, "%.1f"), opt(r.KafkaRecordsPerOrder, "%.2f"))
	if r.PgWALRecordsPerOrder != nil {
		row("", "postgres WAL %.1f records, %.1f KiB (the whole server's)", *r.PgWALRecordsPerOrder, *r.PgWALBytesPerOrder/1024)
	}
	for _, e := range r.Errors {
		row("", "not measured: %s", e)
	}
	row("machine", "%.2f of %d cores busy; podbench itself %.2f cores", r.HostBusyCores, r.HostCores, r.PodbenchCores)
	if r.PgInsertPerS == nil && r.HTTPBaselinePerS == nil {
		row("baselines", "not measured")
	} else {
		row("baselines", "pg INSERT %s/s (accepted/s is %s of it)  bare Fiber %s/s (%s of it)",
			opt(r.PgInsertPerS, "%.0f"), opt(r.RatioPg, "%.3f"), opt(r.HTTPBaselinePerS, "%.0f"), opt(r.RatioHTTP, "%.4f"))
	}
	if f := r.Fault; f != nil {
		what := []string{}
		if f.Kill9 {
			what = append(what, "kill -9 podsvc")
		}
		switch {
		case f.Name != "":
			what = append(what, f.Name)
		case f.Cmd != "":
			what = append(what, fmt.Sprintf("%q", f.Cmd))
		}
		row("fault", "%s at %.1fs, recovered at %.1fs %s", strings.Join(what, " + "), f.AtS, f.RecoveredS, restartList(f.RestartSeconds))
		for _, p := range []string{"before", "during", "after"} {
			c := f.Phases[p]
			row("  "+p, "sent %d, accepted %d (%.1f/s), no answer %d, %s", c.Sent, c.Accepted, f.AcceptedPerS[p], c.NoAnswer, intStatusList(c.ByStatus))
		}
		for _, e := range f.Errors {
			row("  error", "%s", e)
		}
	}
	for _, b := range r.BadReceivers {
		state := ""
		if b.IsActive != nil {
			state = fmt.Sprintf("; webhook active %v", *b.IsActive)
			if b.DisabledReason != nil {
				state += " (" + *b.DisabledReason + ")"
			}
		}
		row("bad receiver", "%s: %d requests for %d events%s", b.Kind, b.Requests, b.Events, state)
	}
	row("check", "lost %d (read model %d, order.created %d)  duplicated %d  redelivered after crash %d  (by %s)",
		r.Lost, r.MissingFromReadModel, r.MissingCreatedWebhook, r.Duplicated, r.RedeliveredAfterCrash, r.CheckedBy)
	if r.Unknown > 0 || r.RejectedButCreated > 0 {
		row("unknown", "%d POSTs without an answer (%d of them created); %d not answered 201 but created", r.Unknown, r.UnknownCreated, r.RejectedButCreated)
	}
	if r.Recorded503 > 0 {
		row("recorded 503", "%d answered 503 \"recorded, will still be applied\"; %d of them never got order.created", r.Recorded503, r.Recorded503NotApplied)
	}
	for _, e := range r.DuplicateExamples {
		row("  duplicate", "%s", e)
	}
	for _, e := range r.RedeliveredExamples {
		row("  redelivered", "%s", e)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.OK {
		_, err := fmt.Fprintln(w, "\nPASS")
		return err
	}
	fmt.Fprintln(w, "\nFAIL")
	for _, f := range r.Failures {
		fmt.Fprintln(w, "  -", f)
	}
	return nil
}

func statusList(m map[string]int) string {
	if len(m) == 0 {
		return "none rejected"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func intStatusList(m map[int]int) string {
	s := map[string]int{}
	for k, v := range m {
		s[fmt.Sprint(k)] = v
	}
	return statusList(s)
}

func kindList(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func restartList(s []float64) string {
	if len(s) == 0 {
		return ""
	}
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = fmt.Sprintf("%.2fs", x)
	}
	return "(podsvc ready " + strings.Join(parts, ", ") + " after the kill)"
}

// kafkaCPU shows the brokers' CPU per order when a real cluster's was
// measured (it is not part of the total).
func kafkaCPU(by map[string]float64) string {
	if v, ok := by[cpuKafka]; ok {
		return fmt.Sprintf("; kafka brokers %.2f more", v)
	}
	return ""
}
