// Command validate checks the deployment files under deploy/ (run by `make lint`
// through deploy/lint.sh, from the repository root: go run ./deploy/validate):
//
//   - deploy/k8s: every document is decoded strictly into its real Kubernetes API
//     type (unknown or misspelled fields fail), kustomization.yaml lists every
//     manifest, and each Deployment has an image, probes on /healthz and /readyz,
//     resource requests and limits, a valid POD_ROLES and a configuration that
//     podsvc itself accepts; Services, PodDisruptionBudgets and
//     HorizontalPodAutoscalers select or target existing Deployments, and the
//     autoscalers' external metrics are served by the prometheus-adapter rules;
//   - deploy/compose/compose.yaml: loaded (and schema-validated) with
//     compose-go, interpolated with .env.example; every podsvc service has
//     POD_ROLES, KAFKA_BROKERS naming the 3 Kafka services, a health check, and a
//     configuration podsvc accepts; Prometheus discovers every podsvc service;
//   - deploy/grafana: provisioning files, and every dashboard panel has a
//     datasource and targets whose expr is valid PromQL; a panel reading
//     broker request round trips selects request types, and one that shows
//     fetches says that they include the fetch wait;
//   - metric names: every metric used by the alert rules, the dashboards and the
//     adapter rules is listed in docs/metrics.md (or recorded by a rule);
//   - every alert has for:, a severity label and a runbook_url whose anchor is a
//     heading of docs/runbook.md.
//
// promtool (also run by deploy/lint.sh) validates the Prometheus configuration and
// rules themselves and runs their unit tests.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// problems collects every finding, so one run reports them all.
type problems struct{ list []string }

func (p *problems) add(file, format string, args ...any) {
	p.list = append(p.list, file+": "+fmt.Sprintf(format, args...))
}

func main() {
	root := flag.String("root", ".", "repository root")
	metrics := flag.String("metrics", "", "the metric list to check names against (default: docs/metrics.md under -root)")
	flag.Parse()
	if _, err := os.Stat(filepath.Join(*root, "deploy")); err != nil {
		fmt.Fprintf(os.Stderr, "validate: %s has no deploy/ folder (run from the repository root)\n", *root)
		os.Exit(2)
	}
	v := &validator{root: *root, metricsFile: *metrics, p: &problems{}, uses: map[string][]string{}}
	v.run()
	if len(v.p.list) > 0 {
		fmt.Fprintf(os.Stderr, "deploy validation failed (%d problems):\n", len(v.p.list))
		for _, s := range v.p.list {
			fmt.Fprintln(os.Stderr, "  "+s)
		}
		os.Exit(1)
	}
	fmt.Printf("deploy: ok (%d Kubernetes objects, %d compose services, %d dashboards, %d metric names checked)\n",
		v.k8sObjects, v.composeServices, v.dashboards, len(v.uses))
}

type validator struct {
	root        string
	metricsFile string // "" is docs/metrics.md
	p           *problems

	// uses maps each metric name used in a PromQL expression to where it is used.
	uses map[string][]string
	// recorded holds the names recording rules define.
	recorded map[string]bool

	k8sObjects, composeServices, dashboards int
}

func (v *validator) path(parts ...string) string {
	return filepath.Join(append([]string{v.root}, parts...)...)
}

// rel is path relative to the repository root, for messages.
func (v *validator) rel(path string) string {
	if r, err := filepath.Rel(v.root, path); err == nil {
		return filepath.ToSlash(r)
	}
	return path
}

func (v *validator) run() {
	anchors := v.runbookAnchors()
	v.checkRules(anchors)
	v.checkK8s()
	services := v.checkCompose()
	v.checkPrometheusConfig(services)
	v.checkGrafana()
	v.checkMetricNames()
}

// use records that expr, found at where, uses metric name.
func (v *validator) use(name, where string) {
	v.uses[name] = append(v.uses[name], where)
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func readFile(p *problems, path, rel string) ([]byte, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		p.add(rel, "%v", err)
		return nil, false
	}
	return b, true
}

// isPlaceholder reports whether a configured value is one of the CHANGE_ME
// placeholders of secret.yaml and .env.example.
func isPlaceholder(s string) bool { return strings.Contains(s, "CHANGE_ME") }
