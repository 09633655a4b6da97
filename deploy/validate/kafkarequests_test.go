package main

import "testing"

func TestRequestTypedPanels(t *testing.T) {
	p99 := func(selector string) string {
		return `histogram_quantile(0.99, sum by (client_id, le) (rate(pod_kafka_request_duration_e2e_seconds_bucket` + selector + `[5m])))`
	}
	for _, c := range []struct {
		name, text, expr string
		problem          bool
	}{
		{"a p99 over every request type reads the fetch wait as latency", "Broker request latency p99 by client", p99(""), true},
		{"produce requests alone are latency", "Produce latency p99 by client", p99(`{request="Produce"}`), false},
		{"fetches in a panel that says they include the wait are fine", "Fetch round trip (includes the fetch wait)", p99(`{request="Fetch"}`), false},
		{"fetches in a panel that calls them latency are not", "Fetch latency p99", p99(`{request="Fetch"}`), true},
		{"a pattern that takes fetches in needs the same warning", "Request latency", p99(`{request=~"Produce|Fetch"}`), true},
		{"a pattern that leaves fetches out is latency", "Request latency", p99(`{request!="Fetch"}`), false},
		{"other histograms are not concerned", "Batch latency",
			`histogram_quantile(0.99, sum by (le) (rate(pod_consumer_batch_seconds_bucket[5m])))`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := requestTypeProblems(c.text, c.expr)
			if (len(got) > 0) != c.problem {
				t.Errorf("%s: problems %q, want a problem: %v", c.expr, got, c.problem)
			}
		})
	}
}
