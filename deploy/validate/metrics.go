package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// metricNames extracts the metric names a PromQL expression selects.
func metricNames(expr string) ([]string, error) {
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name != "" {
			names = append(names, vs.Name)
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" {
				names = append(names, m.Value)
			}
		}
		return nil
	})
	return names, nil
}

// useExpr parses expr and records its metric names; a parse error is a problem
// of file.
func (v *validator) useExpr(file, where, expr string) {
	names, err := metricNames(expr)
	if err != nil {
		v.p.add(file, "%s: invalid PromQL %q: %v", where, expr, err)
		return
	}
	for _, n := range names {
		v.use(n, file+": "+where)
	}
}

// metricToken is a backticked metric name in docs/metrics.md, with optional
// labels ({...}) or a trailing * for a family of names.
var metricToken = regexp.MustCompile("`([a-zA-Z_:][a-zA-Z0-9_:]*)(\\*)?(?:\\{[^`]*\\})?`")

// documentedMetrics reads the metric names docs/metrics.md lists: every
// backticked token that looks like a metric name (it has an underscore); one
// ending in * names a prefix.
func (v *validator) documentedMetrics() (names map[string]bool, prefixes []string, ok bool) {
	path, rel := v.path("docs", "metrics.md"), "docs/metrics.md"
	if v.metricsFile != "" {
		path, rel = v.metricsFile, v.metricsFile
	}
	b, ok := readFile(v.p, path, rel)
	if !ok {
		return nil, nil, false
	}
	names = map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		for _, m := range metricToken.FindAllStringSubmatch(line, -1) {
			if !strings.Contains(m[1], "_") {
				continue
			}
			if m[2] == "*" {
				prefixes = append(prefixes, m[1])
			} else {
				names[m[1]] = true
			}
		}
	}
	if len(names) == 0 && len(prefixes) == 0 {
		v.p.add(rel, "lists no metric name (expected backticked names such as `pod_http_requests_total`)")
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
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
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
