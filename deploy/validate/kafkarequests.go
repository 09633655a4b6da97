package main

import (
	"strings"

	"github.com/printpod/pod/internal/metricnames"
	"github.com/prometheus/prometheus/promql/parser"
)

// requestTyped are the histograms whose observations are requests of every
// type, told apart by the label "request". One type is mostly waiting: a
// broker holds a Fetch until records arrive or the client's fetch max wait
// ends, so a quantile over every type, or over fetches, is not a latency.
var requestTyped = map[string]bool{"pod_kafka_request_duration_e2e_seconds": true}

// checkRequestTypes checks a dashboard query of a request-typed histogram:
// it must select request types (a query over all of them reads the fetch
// wait as latency), and a panel whose query may include Fetch must say, in
// its title or description (text), that it includes the wait.
func (v *validator) checkRequestTypes(rel, where, text, expr string) {
	for _, p := range requestTypeProblems(text, expr) {
		v.p.add(rel, "%s: %s", where, p)
	}
}

func requestTypeProblems(text, expr string) []string {
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return nil // useExpr reports it
	}
	var out []string
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, suffix := range metricnames.HistogramSeries {
			name = strings.TrimSuffix(name, suffix)
		}
		if !requestTyped[name] {
			return nil
		}
		selected := false
		for _, m := range vs.LabelMatchers {
			if m.Name != "request" {
				continue
			}
			selected = true
			if m.Matches("Fetch") && !strings.Contains(strings.ToLower(text), "wait") {
				out = append(out, name+" may include Fetch requests, which brokers hold up to the fetch max wait: "+
					"say so in the panel's title or description (\"wait\"), or leave Fetch out")
			}
		}
		if !selected {
			out = append(out, name+" is read over every request type, so fetches held up to the fetch max wait "+
				"count as latency: select request=\"Produce\" (or another type), or request=\"Fetch\" in a panel that says it includes the wait")
		}
		return nil
	})
	return out
}
