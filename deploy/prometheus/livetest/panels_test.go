package livetest

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/printpod/pod/internal/testenv"
)

// emptyWhenHealthy are the dashboard queries (dashboard / panel / refId)
// that return nothing in a healthy run, and why. The test requires them to
// be empty there, so the list stays true.
var emptyWhenHealthy = map[string]string{}

// rateInterval stands for Grafana's $__rate_interval: a few of the test's
// 1 s scrape intervals.
const rateInterval = "30s"

// panelQuery is one target of one dashboard panel, or a template
// variable's query.
type panelQuery struct {
	key  string // dashboard / panel / refId
	expr string // with Grafana's variables substituted
}

type dashboardJSON struct {
	Title string `json:"title"`
	Time  struct {
		From string `json:"from"`
	} `json:"time"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			IncludeAll bool            `json:"includeAll"`
			AllValue   string          `json:"allValue"`
			Query      json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panelJSON `json:"panels"`
}

type panelJSON struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panelJSON `json:"panels"` // a collapsed row's
}

// grafanaVariable matches $name, ${name} and ${name:format}.
var grafanaVariable = regexp.MustCompile(`\$\{([a-zA-Z0-9_]+)(?::[^}]*)?\}|\$([a-zA-Z0-9_]+)`)

// labelValues is a variable query label_values(expr, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// dashboardQueries lists every query of every dashboard, with Grafana's
// variables replaced as Grafana would on the dashboard's default view:
// $__rate_interval by rateInterval, $__interval by 15s, $__range by the
// dashboard's default time range, and each template variable by its "All"
// value. A label_values variable becomes a query of its series.
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "deploy", "grafana", "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	var out []panelQuery
	for _, f := range files {
		var d dashboardJSON
		if err := json.Unmarshal(readRepoFile(t, "deploy", "grafana", "dashboards", filepath.Base(f)), &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		rng := strings.TrimPrefix(d.Time.From, "now-")
		if rng == d.Time.From {
			t.Fatalf("%s: default time range %q is not now-<duration>", d.Title, d.Time.From)
		}
		values := map[string]string{"__rate_interval": rateInterval, "__interval": "15s", "__range": rng}
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			if !v.IncludeAll || v.AllValue == "" {
				t.Fatalf("%s: variable $%s has no All value to substitute", d.Title, v.Name)
			}
			values[v.Name] = v.AllValue
			var q struct {
				Query string `json:"query"`
			}
			if json.Unmarshal(v.Query, &q) != nil {
				_ = json.Unmarshal(v.Query, &q.Query)
			}
			m := labelValues.FindStringSubmatch(q.Query)
			if m == nil {
				t.Fatalf("%s: variable $%s: query %q is not label_values(series, label)", d.Title, v.Name, q.Query)
			}
			out = append(out, panelQuery{key: d.Title + " / variable $" + v.Name, expr: fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
		}
		subst := func(expr string) string {
			return grafanaVariable.ReplaceAllStringFunc(expr, func(s string) string {
				sub := grafanaVariable.FindStringSubmatch(s)
				v, ok := values[sub[1]+sub[2]]
				if !ok {
					t.Fatalf("%s: %s uses an unknown variable %s", d.Title, expr, s)
				}
				return v
			})
		}
		var walk func(ps []panelJSON)
		walk = func(ps []panelJSON) {
			for _, p := range ps {
				walk(p.Panels)
				for _, tg := range p.Targets {
					out = append(out, panelQuery{key: d.Title + " / " + p.Title + " / " + tg.RefID, expr: subst(tg.Expr)})
				}
			}
		}
		walk(d.Panels)
	}
	return out
}

// hasData reports whether an answer holds a number: NaN and ±Inf (a
// quantile of no observations, a ratio of nothing) are no data on a panel.
func hasData(ss []sample) bool {
	for _, s := range ss {
		if !math.IsNaN(s.Value) && !math.IsInf(s.Value, 0) {
			return true
		}
	}
	return false
}

// checkPanels waits until every dashboard query has returned data, except
// those of emptyWhenHealthy, which must never have; it returns the report
// of every query (data, or the stated reason) and the answers.
func checkPanels(t *testing.T, p *promServer, timeout time.Duration) (string, map[string][]sample) {
	t.Helper()
	queries := dashboardQueries(t)
	for key := range emptyWhenHealthy {
		found := false
		for _, q := range queries {
			found = found || q.key == key
		}
		if !found {
			t.Errorf("emptyWhenHealthy lists %q, which no dashboard has", key)
		}
	}
	seen := map[string][]sample{}
	var unexpected []string
	err := testenv.Poll(timeout, func() error {
		var missing []string
		for _, q := range queries {
			if seen[q.key] != nil {
				continue
			}
			ss, err := p.query(q.expr)
			if err != nil {
				t.Fatalf("%s: %s: %v", q.key, q.expr, err)
			}
			switch {
			case hasData(ss) && emptyWhenHealthy[q.key] != "":
				seen[q.key] = ss
				unexpected = append(unexpected, q.key)
			case hasData(ss):
				seen[q.key] = ss
			case emptyWhenHealthy[q.key] == "":
				missing = append(missing, q.key+": "+q.expr)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no data yet for %d queries:\n  %s", len(missing), strings.Join(missing, "\n  "))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	for _, k := range unexpected {
		t.Errorf("%s returned data in a healthy run, but emptyWhenHealthy says: %s (%v)", k, emptyWhenHealthy[k], seen[k])
	}
	var lines []string
	for _, q := range queries {
		switch ss := seen[q.key]; {
		case ss != nil:
			lines = append(lines, fmt.Sprintf("  data   %s: %d series, e.g. %s", q.key, len(ss), firstFinite(ss)))
		case emptyWhenHealthy[q.key] != "":
			lines = append(lines, fmt.Sprintf("  empty  %s: %s", q.key, emptyWhenHealthy[q.key]))
		default:
			lines = append(lines, fmt.Sprintf("  NONE   %s: %s", q.key, q.expr))
		}
	}
	return strings.Join(lines, "\n"), seen
}

func firstFinite(ss []sample) string {
	sorted := append([]sample(nil), ss...)
	sort.Slice(sorted, func(i, j int) bool { return fmt.Sprint(sorted[i].Labels) < fmt.Sprint(sorted[j].Labels) })
	for _, s := range sorted {
		if !math.IsNaN(s.Value) && !math.IsInf(s.Value, 0) {
			return s.String()
		}
	}
	return ""
}
