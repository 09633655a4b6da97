// Package metricnames reads metric names where the project writes them down:
// the names a PromQL expression selects (alert rules, dashboard panels) and
// the names docs/metrics.md lists. deploy/validate checks with it that every
// name the rules and dashboards use is listed; the live Prometheus test
// (deploy/prometheus/livetest) that the list is exactly what podsvc serves.
package metricnames

import (
	"regexp"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// InExpr returns the metric names a PromQL expression selects, in order of
// appearance (a name may repeat).
func InExpr(expr string) ([]string, error) {
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

// HistogramSeries are the suffixes of a classic histogram's series.
var HistogramSeries = []string{"_bucket", "_sum", "_count"}

// listed is a table row of docs/metrics.md that documents a metric: its
// first cell is the backticked name.
var listed = regexp.MustCompile("^\\|\\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\\s*\\|")

// family is a backticked family of names in prose, such as `go_*`.
var family = regexp.MustCompile("`([a-zA-Z_:][a-zA-Z0-9_:]*_)\\*`")

// Documented reads the metrics a Markdown text such as docs/metrics.md
// lists: the backticked name in the first cell of each table row
// (| `pod_http_requests_total` | counter | …), and the families it names in
// prose as a prefix with a star (`go_*`). Other backticked words (labels,
// settings, PromQL) are not metric names.
func Documented(markdown string) (names map[string]bool, prefixes []string) {
	names = map[string]bool{}
	for _, line := range strings.Split(markdown, "\n") {
		if m := listed.FindStringSubmatch(line); m != nil {
			names[m[1]] = true
		}
		for _, m := range family.FindAllStringSubmatch(line, -1) {
			prefixes = append(prefixes, m[1])
		}
	}
	return names, prefixes
}
