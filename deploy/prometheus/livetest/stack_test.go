package livetest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/printpod/pod/cmd/podsvc/app"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// binDir holds podsvc and podbench, built once per test binary run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pod-livetest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var (
	podsvcBinary   = &podtest.Binary{Pkg: "github.com/printpod/pod/cmd/podsvc"}
	podbenchBinary = &podtest.Binary{Pkg: "github.com/printpod/pod/cmd/podbench"}
)

// role is the role label of the one podsvc of a stack: it runs them all.
const role = "all"

// loadRate is podbench's rate, in orders per second.
const loadRate = 20

// stack is one fresh podsvc (every role, embedded broker, a new database,
// data directory and Redis prefix) scraped by its own fresh Prometheus.
type stack struct {
	dir      string
	dbURL    string
	addr     string // podsvc's API and /metrics
	dataDir  string
	api      *testenv.Client
	podsvc   *process
	prom     *promServer
	receiver string // podbench's webhook receiver
	dead     string // an address nothing listens on, allowed as a webhook target
	flaky    string // an address allowed as a webhook target, for flakyWebhook's endpoint

	// atStart are the metric families podsvc served before any load, once
	// every consumer group had joined and the lag of each was read.
	atStart map[string]*dto.MetricFamily
}

// newStack starts podsvc, reads its /metrics before any load, then starts
// Prometheus.
func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{dir: t.TempDir(), dbURL: testenv.NewDatabase(t), addr: testenv.FreeAddr(t), receiver: testenv.FreeAddr(t), dead: testenv.FreeAddr(t), flaky: testenv.FreeAddr(t)}
	s.dataDir = filepath.Join(s.dir, "var")
	delays := strings.TrimSuffix(strings.Repeat("1s,", 6), ",")
	env := []string{
		"POD_ENV=development", "POD_HTTP_ADDR=" + s.addr, "DATABASE_URL=" + s.dbURL,
		"REDIS_URL=" + testenv.RedisURL(), "POD_REDIS_PREFIX=livetest:" + testenv.RandomSuffix() + ":",
		"POD_DATA_DIR=" + s.dataDir, "KAFKA_BROKERS=", "POD_KAFKA_PARTITIONS=3", "POD_DEMO_TOKEN=demo-token",
		"POD_LOG_LEVEL=warn", "POD_METRICS_REFRESH=1s", "POD_WEBHOOK_RETRY_DELAYS=" + delays,
		"POD_PUSH_RETRY_DELAYS=1s,1s,1s", "POD_WEBHOOK_ALLOW_TARGETS=" + s.receiver + "," + s.dead + "," + s.flaky,
	}
	s.podsvc = newProcess(t, "podsvc", filepath.Join(s.dir, "podsvc.log"), env, podsvcBinary.Build(t, binDir))
	s.api = testenv.NewClient(t, "http://"+s.addr, "demo-token")
	hc := &http.Client{Timeout: 2 * time.Second}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := s.podsvc.running(); err != nil {
			return err
		}
		resp, err := hc.Get("http://" + s.addr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("readyz: %d", resp.StatusCode)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		mfs, err := s.scrape()
		if err != nil {
			return err
		}
		if mfs["pod_lag_refreshed_timestamp_seconds"] == nil || mfs["pod_orders"] == nil {
			return fmt.Errorf("first lag and order-count refresh not done yet")
		}
		// A group's lag is reported once it joined (or committed): start
		// is when every consumer of this all-roles process has.
		groups := map[string]bool{}
		for _, m := range mfs["pod_consumer_lag"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "group" {
					groups[l.GetValue()] = true
				}
			}
		}
		for _, g := range app.ConsumerGroups {
			if !groups[g] {
				return fmt.Errorf("no lag reported yet for group %s", g)
			}
		}
		s.atStart = mfs
		return nil
	})
	s.prom = startPrometheus(t, s.dir, s.addr, role)
	return s
}

// scrape reads podsvc's /metrics.
func (s *stack) scrape() (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("/metrics: %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// startLoad runs podbench against podsvc at loadRate orders per second
// until the test ends. It registers a webhook of its own (every topic) at
// its receiver, and orders through the public API with the demo token.
func (s *stack) startLoad(t *testing.T) *process {
	t.Helper()
	return newProcess(t, "podbench", filepath.Join(s.dir, "podbench.log"), nil, podbenchBinary.Build(t, binDir),
		"--target", "http://"+s.addr, "--rate", fmt.Sprint(loadRate), "--duration", "15m", "--warmup", "0s",
		"--baseline=false", "--receiver-addr", s.receiver, "--database-url", s.dbURL)
}
