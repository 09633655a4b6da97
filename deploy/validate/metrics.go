package main

import (
	"fmt"
	"strings"

	"github.com/printpod/pod/internal/metricnames"
)

// useExpr parses expr and records its metric names; a parse error is a problem
// of file.
func (v *validator) useExpr(file, where, expr string) {
	names, err := metricnames.InExpr(expr)
	if err != nil {
		v.p.add(file, "%s: invalid PromQL %q: %v", where, expr, err)
		return
	}
	for _, n := range names {
		v.use(n, file+": "+where)
	}
}

// documentedMetrics reads the metric names docs/metrics.md lists (the first
// cell of its table rows) and the families it names as a prefix (`go_*`);
// see metricnames.Documented.
func (v *validator) documentedMetrics() (names map[string]bool, prefixes []string, ok bool) {
	path, rel := v.path("docs", "metrics.md"), "docs/metrics.md"
	if v.metricsFile != "" {
		path, rel = v.metricsFile, v.metricsFile
	}
	b, ok := readFile(v.p, path, rel)
	if !ok {
		return nil, nil, false
	}
	names, prefixes = metricnames.Documented(string(b))
	if len(names) == 0 && len(prefixes) == 0 {
		v.p.add(rel, "lists no metric name (expected table rows such as | `pod_http_requests_total` | counter | … |)")
		return nil, nil, false
	}
	return names, prefixes, true
}

// builtinMetrics are series Prometheus itself makes.
var builtinMetrics = map[string]bool{
	"up": true, "scrape_duration_seconds": true, "scrape_samples_scraped": true,
	"scrape_samples_post_metric_relabeling": true, "scrape_series_added": true,
	"ALERTS": true, "ALERTS_FOR_STATE": true,
}

// checkMetricNames reports every used metric name that docs/metrics.md does
// not list and no recording rule defines. The series of a histogram
// (_bucket, _sum, _count) count as the histogram's name.
func (v *validator) checkMetricNames() {
	names, prefixes, ok := v.documentedMetrics()
	if !ok {
		return
	}
	known := func(n string) bool {
		if names[n] || v.recorded[n] || builtinMetrics[n] {
			return true
		}
		for _, p := range prefixes {
			if strings.HasPrefix(n, p) {
				return true
			}
		}
		for _, suffix := range metricnames.HistogramSeries {
			if base, found := strings.CutSuffix(n, suffix); found && names[base] {
				return true
			}
		}
		return false
	}
	for _, n := range sortedKeys(v.uses) {
		if !known(n) {
			where := v.uses[n]
			more := ""
			if len(where) > 1 {
				more = fmt.Sprintf(" (and %d more places)", len(where)-1)
			}
			v.p.add("docs/metrics.md", "metric %q is used but not listed: %s%s", n, where[0], more)
		}
	}
}
