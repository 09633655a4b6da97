package livetest

import (
	"sort"
	"strings"
	"testing"

	"github.com/printpod/pod/internal/metricnames"
	dto "github.com/prometheus/client_model/go"
)

// prometheusOwn are series Prometheus makes itself, not podsvc.
var prometheusOwn = map[string]bool{"up": true, "ALERTS": true, "ALERTS_FOR_STATE": true}

// usedMetrics are the metric names the dashboards and the alert rules
// select (a histogram's series under the histogram's name), without the
// names recording rules make and Prometheus's own.
func usedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	recorded := map[string]bool{}
	used := map[string][]string{}
	use := func(where, expr string) {
		names, err := metricnames.InExpr(expr)
		if err != nil {
			t.Fatalf("%s: %q: %v", where, expr, err)
		}
		for _, n := range names {
			for _, suffix := range metricnames.HistogramSeries {
				n = strings.TrimSuffix(n, suffix)
			}
			used[n] = append(used[n], where)
		}
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if name, _ := r["record"].(string); name != "" {
				recorded[name] = true
			}
		}
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			name, _ := r["alert"].(string)
			if name == "" {
				name, _ = r["record"].(string)
			}
			expr, _ := r["expr"].(string)
			use("alerts.yml "+name, expr)
		}
	}
	for _, q := range dashboardQueries(t) {
		use(q.key, q.expr)
	}
	for n := range used {
		if recorded[n] || prometheusOwn[n] {
			delete(used, n)
		}
	}
	return used
}

// checkUsedFromStart requires every metric the dashboards and alerts use
// to be on /metrics before any load.
func checkUsedFromStart(t *testing.T, atStart map[string]*dto.MetricFamily) {
	t.Helper()
	used := usedMetrics(t)
	for _, n := range sortedKeys(used) {
		if mf := atStart[n]; mf == nil || len(mf.GetMetric()) == 0 {
			t.Errorf("%s is not on /metrics at start (used by %s)", n, strings.Join(used[n], "; "))
		}
	}
	t.Logf("all %d metrics the dashboards and alerts use are on /metrics from start", len(used))
}

// checkDocumentedSet requires docs/metrics.md to list exactly the metric
// families podsvc serves: every served name listed (by name or by a
// listed prefix such as `go_*`), every listed name served, and every
// listed prefix matching a served name.
func checkDocumentedSet(t *testing.T, live map[string]*dto.MetricFamily) {
	t.Helper()
	names, prefixes := metricnames.Documented(string(readRepoFile(t, "docs", "metrics.md")))
	byPrefix := func(n string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(n, p) {
				return true
			}
		}
		return false
	}
	for _, n := range sortedKeys(live) {
		if !names[n] && !byPrefix(n) {
			t.Errorf("podsvc serves %s, which docs/metrics.md does not list", n)
		}
	}
	for _, n := range sortedKeys(names) {
		if live[n] == nil {
			t.Errorf("docs/metrics.md lists %s, which podsvc does not serve", n)
		}
	}
	for _, p := range prefixes {
		found := false
		for n := range live {
			found = found || strings.HasPrefix(n, p)
		}
		if !found {
			t.Errorf("docs/metrics.md lists %s*, and podsvc serves no such metric", p)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
