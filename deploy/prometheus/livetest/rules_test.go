package livetest

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/printpod/pod/internal/testenv"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

// keptFor are the alerts whose for: the loaded copy keeps, and why.
var keptFor = map[string]string{
	"PodConsumerBatchFailures": "its for: (10m) is as long as its window (increase over 10m), which is what makes it mean " +
		"\"failing in every 10-minute window for 10 minutes\"; shortened, one failed batch (a poison record's few tries " +
		"before it is dead-lettered) would fire it, which in production it does not",
}

// forScale is how much shorter the loaded for: durations are: minutes read
// as seconds.
const forScale = 60

// ruleFile is alerts.yml as generic YAML, so the copy keeps every field.
type ruleFile struct {
	Groups []struct {
		Name  string           `json:"name"`
		Rules []map[string]any `json:"rules"`
	} `json:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	var rf ruleFile
	if err := yaml.Unmarshal(readRepoFile(t, "deploy", "prometheus", "alerts.yml"), &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

// loadedRules is alerts.yml with every alert's for: divided by forScale
// (10m becomes 10s), except those of keptFor. Expressions, labels and
// annotations are the file's.
func loadedRules(t *testing.T) []byte {
	t.Helper()
	rf := readRules(t)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name, _ := r["alert"].(string)
			if name == "" || keptFor[name] != "" {
				continue
			}
			f, _ := r["for"].(string)
			d, err := model.ParseDuration(f)
			if err != nil {
				t.Fatalf("alert %s: for: %q: %v", name, f, err)
			}
			r["for"] = model.Duration(max(time.Duration(d)/forScale, time.Second)).String()
		}
	}
	b, err := yaml.Marshal(rf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// alertFor describes the for: each alert has in the loaded copy, for the
// report.
func alertFor(t *testing.T) string {
	t.Helper()
	var lines []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			name, _ := r["alert"].(string)
			if name == "" {
				continue
			}
			f, _ := r["for"].(string)
			if why := keptFor[name]; why != "" {
				lines = append(lines, fmt.Sprintf("  %s: for: %s kept: %s", name, f, why))
				continue
			}
			d, _ := model.ParseDuration(f)
			lines = append(lines, fmt.Sprintf("  %s: for: %s loaded as %s", name, f,
				model.Duration(max(time.Duration(d)/forScale, time.Second))))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// ruleNames are the names of every rule of alerts.yml (recording and
// alerting), and of its alerts alone.
func ruleNames(t *testing.T) (all, alerts []string) {
	t.Helper()
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if name, _ := r["alert"].(string); name != "" {
				all, alerts = append(all, name), append(alerts, name)
			} else if name, _ := r["record"].(string); name != "" {
				all = append(all, name)
			}
		}
	}
	return all, alerts
}

// waitRulesHealthy waits until Prometheus loaded every rule of alerts.yml
// and evaluated each without error.
func waitRulesHealthy(t *testing.T, p *promServer) {
	t.Helper()
	want, _ := ruleNames(t)
	testenv.Eventually(t, 30*time.Second, func() error {
		rules, err := p.rules()
		if err != nil {
			return err
		}
		if len(rules) != len(want) {
			return fmt.Errorf("%d rules loaded, alerts.yml has %d", len(rules), len(want))
		}
		for _, r := range rules {
			if r.Health != "ok" {
				return fmt.Errorf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
			}
		}
		return nil
	})
}
