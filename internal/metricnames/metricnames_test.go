package metricnames

import (
	"reflect"
	"sort"
	"testing"
)

func TestDocumentedReadsTableRowsAndFamilies(t *testing.T) {
	const doc = "# Metrics\n" +
		"Served on `POD_HTTP_ADDR`; aggregate with `max by (group) (pod_consumer_lag)` and label `client_id`.\n" +
		"| name | type | labels | meaning |\n" +
		"|---|---|---|---|\n" +
		"| `pod_http_requests_total` | counter | route | Requests, e.g. `pod_http_requests_total{route=\"unmatched\"}`. |\n" +
		"| `pod_consumer_lag` | gauge | group | See `pod_topic_end_offset`. |\n" +
		"The standard `go_*` collectors and `process_*`.\n"
	names, prefixes := Documented(doc)
	var got []string
	for n := range names {
		got = append(got, n)
	}
	sort.Strings(got)
	if want := []string{"pod_consumer_lag", "pod_http_requests_total"}; !reflect.DeepEqual(got, want) {
		t.Errorf("names %v, want %v (settings, labels, PromQL and names mentioned in a meaning are not listed)", got, want)
	}
	if want := []string{"go_", "process_"}; !reflect.DeepEqual(prefixes, want) {
		t.Errorf("prefixes %v, want %v", prefixes, want)
	}
}

func TestInExprNamesEverySelector(t *testing.T) {
	got, err := InExpr(`sum(rate(a_total[5m])) / on () group_left b{x="y"} + {__name__="c"}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a_total", "b", "c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("InExpr: %v, want %v", got, want)
	}
}
