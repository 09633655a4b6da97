package livetest

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/printpod/pod/internal/testenv"
	"sigs.k8s.io/yaml"
)

// prometheusEnv names the Prometheus server binary; `make test` sets it
// from deploy/local/prometheus.sh.
const prometheusEnv = "POD_TEST_PROMETHEUS"

// prometheusBinary is the server the test runs.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(prometheusEnv); p != "" {
		return p
	}
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	t.Fatalf("no Prometheus server: this test runs a real one. Install it with `bash deploy/local/prometheus.sh` " +
		"(Debian's prometheus package; `make test` does) or set " + prometheusEnv + " to a prometheus binary")
	return ""
}

// promServer is a Prometheus server scraping one podsvc.
type promServer struct {
	url   string
	start time.Time
	hc    *http.Client
}

// startPrometheus runs Prometheus on a free port with an empty data
// directory, scraping the podsvc at target as job podsvc with role, and
// loading the rules of alerts.yml with shortened for: durations.
func startPrometheus(t *testing.T, dir, target, role string) *promServer {
	t.Helper()
	listen := testenv.FreeAddr(t)
	cfgDir := filepath.Join(dir, "prometheus")
	if err := os.MkdirAll(filepath.Join(cfgDir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(cfgDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("prometheus.yml", scrapeConfig(t, listen, target, role))
	write("alerts.yml", loadedRules(t))
	newProcess(t, "prometheus", filepath.Join(dir, "prometheus.log"), nil, prometheusBinary(t),
		"--config.file="+filepath.Join(cfgDir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(cfgDir, "data"),
		"--web.listen-address="+listen,
		"--log.level=warn")
	p := &promServer{url: "http://" + listen, start: time.Now(), hc: &http.Client{Timeout: 10 * time.Second}}
	testenv.Eventually(t, 30*time.Second, func() error {
		resp, err := p.hc.Get(p.url + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("/-/ready: %d", resp.StatusCode)
		}
		return nil
	})
	return p
}

// scrapeConfig is deploy/prometheus/prometheus.yml with 1 s intervals, the
// loaded copy of the rules, and static targets where it discovers them by
// DNS: the podsvc under test (its __meta_dns_name, which the file's
// relabelling turns into the role label, is role) and this Prometheus.
func scrapeConfig(t *testing.T, listen, target, role string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(readRepoFile(t, "deploy", "prometheus", "prometheus.yml"), &cfg); err != nil {
		t.Fatal(err)
	}
	global, _ := cfg["global"].(map[string]any)
	if global == nil {
		t.Fatal("prometheus.yml has no global section")
	}
	global["scrape_interval"], global["scrape_timeout"], global["evaluation_interval"] = "1s", "1s", "1s"
	if rf, _ := cfg["rule_files"].([]any); len(rf) != 1 || rf[0] != "alerts.yml" {
		t.Fatalf("prometheus.yml loads rule files %v; this test loads a copy of alerts.yml in their place", cfg["rule_files"])
	}
	scs, _ := cfg["scrape_configs"].([]any)
	podsvc := false
	for _, raw := range scs {
		sc, _ := raw.(map[string]any)
		switch sc["job_name"] {
		case "podsvc":
			podsvc = true
			if sc["metrics_path"] != "/metrics" {
				t.Fatalf("prometheus.yml: job podsvc scrapes %v, podsvc serves /metrics", sc["metrics_path"])
			}
			if _, ok := sc["dns_sd_configs"]; !ok {
				t.Fatal("prometheus.yml: job podsvc has no dns_sd_configs to stand in for")
			}
			delete(sc, "dns_sd_configs")
			sc["static_configs"] = []any{map[string]any{"targets": []any{target}, "labels": map[string]any{"__meta_dns_name": role}}}
		case "prometheus":
			sc["static_configs"] = []any{map[string]any{"targets": []any{listen}}}
		}
	}
	if !podsvc {
		t.Fatal("prometheus.yml has no job podsvc")
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// promResponse is the envelope of Prometheus's HTTP API.
type promResponse struct {
	Status string          `json:"status"`
	Error  string          `json:"error"`
	Data   json.RawMessage `json:"data"`
}

func (p *promServer) get(path string, q url.Values, into any) error {
	resp, err := p.hc.Get(p.url + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r promResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %d %s", path, resp.StatusCode, b)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, q, r.Error)
	}
	return json.Unmarshal(r.Data, into)
}

// sample is one series of a query's answer at one instant.
type sample struct {
	Labels map[string]string
	Value  float64
}

func (s sample) String() string {
	return fmt.Sprintf("%v = %.4g", s.Labels, s.Value)
}

// query evaluates expr now (an instant query).
func (p *promServer) query(expr string) ([]sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	switch data.ResultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &vec); err != nil {
			return nil, err
		}
		out := make([]sample, 0, len(vec))
		for _, v := range vec {
			out = append(out, sample{Labels: v.Metric, Value: parseValue(v.Value[1])})
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, err
		}
		return []sample{{Labels: map[string]string{}, Value: parseValue(v[1])}}, nil
	}
	return nil, fmt.Errorf("%s: result type %s", expr, data.ResultType)
}

func parseValue(v any) float64 {
	s, _ := v.(string)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

// rule is a rule as Prometheus loaded and last evaluated it.
type rule struct {
	Name      string `json:"name"`
	Type      string `json:"type"` // recording or alerting
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

func (p *promServer) rules() ([]rule, error) {
	var data struct {
		Groups []struct {
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get("/api/v1/rules", nil, &data); err != nil {
		return nil, err
	}
	var out []rule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

// alert is an active (pending or firing) alert.
type alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

func (p *promServer) alerts() ([]alert, error) {
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	err := p.get("/api/v1/alerts", nil, &data)
	return data.Alerts, err
}

// everActive returns the alerts that were in state (pending or firing) at
// any evaluation since from, from Prometheus's ALERTS series: name and
// labels of each.
func (p *promServer) everActive(state string, from time.Time) ([]sample, error) {
	window := int(math.Ceil(time.Since(from).Seconds())) + 1
	return p.query(fmt.Sprintf(`max_over_time(ALERTS{alertstate=%q}[%ds])`, state, window))
}
