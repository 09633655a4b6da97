package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/cmd/podsvc/app"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// scrape reads /metrics of addr as the Prometheus text format.
func scrape(t testing.TB, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	r := testenv.NewClient(t, "http://"+addr, "").Get("/metrics")
	if r.Status != 200 {
		t.Fatalf("/metrics: %d", r.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(r.Body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// series is one family's samples keyed by their labels ("k=v,k=v"),
// counter, gauge or histogram count alike.
func series(mfs map[string]*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	mf := mfs[name]
	if mf == nil {
		return out
	}
	for _, m := range mf.GetMetric() {
		var labels []string
		for _, l := range m.GetLabel() {
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		sort.Strings(labels)
		var v float64
		switch {
		case m.Counter != nil:
			v = m.GetCounter().GetValue()
		case m.Gauge != nil:
			v = m.GetGauge().GetValue()
		case m.Histogram != nil:
			v = float64(m.GetHistogram().GetSampleCount())
		}
		out[strings.Join(labels, ",")] = v
	}
	return out
}

// TestMetricsCoverEveryStage drives orders and webhook deliveries (one
// endpoint healthy, one failing) and checks that /metrics reports every
// family the operators' dashboards and alerts use, that the registry is
// promlint-clean, and that the exported lag equals what kadm computes.
func TestMetricsCoverEveryStage(t *testing.T) {
	good, bad := newReceiver(t), newReceiver(t)
	bad.respond = func(received, int) int { return 503 }
	d := startDemo(t, allow(good, bad), func(c *config.Config) {
		c.MetricsRefresh = 200 * time.Millisecond
		c.WebhookRetryDelays = []time.Duration{time.Second, time.Second, time.Second, time.Second, time.Second, time.Second}
	})
	createWebhook(t, d.client, good.url("/ok"))
	createWebhook(t, d.client, bad.url("/down"))
	v := d.variant(t, "ACTIVE", "tshirt")
	for i := 0; i < 3; i++ {
		if r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "m-"+uuid.NewString()[:8], 1)); r.Status != 201 {
			t.Fatalf("create order: %d %s", r.Status, r.Body)
		}
	}
	if r := d.client.Do("POST", "/v1/orders/pod", map[string]any{}); r.Status != 400 {
		t.Fatalf("empty order: %d", r.Status)
	}

	var mfs map[string]*dto.MetricFamily
	testenv.Eventually(t, 60*time.Second, func() error {
		mfs = scrape(t, d.app.Addr())
		attempts := series(mfs, "pod_webhook_attempts_total")
		for _, want := range []string{"outcome=success,status_class=2xx", "outcome=retry,status_class=5xx"} {
			if attempts[want] == 0 {
				return fmt.Errorf("pod_webhook_attempts_total{%s} not counted yet: %v", want, attempts)
			}
		}
		orders := series(mfs, "pod_orders")
		total := 0.0
		for _, st := range schemas.OrderStatuses {
			n, ok := orders["status="+st]
			if !ok {
				return fmt.Errorf("pod_orders has no series for %s: %v", st, orders)
			}
			total += n
		}
		if total < 3 {
			return fmt.Errorf("pod_orders counts %v orders, want at least 3", total)
		}
		lag := series(mfs, "pod_consumer_lag")
		for _, g := range app.ConsumerGroups {
			if !hasLabel(lag, "group="+g) {
				return fmt.Errorf("no pod_consumer_lag for group %s", g)
			}
		}
		for _, topic := range append([]string{schemas.TopicWebhookDeliveries}, schemas.WebhookRetryTiers...) {
			if !hasLabel(lag, "group="+"delivery.sender", "topic="+topic) {
				return fmt.Errorf("no pod_consumer_lag for delivery.sender on %s", topic)
			}
		}
		// The delivery log lingers a second over its batches.
		batches := series(mfs, "pod_consumer_batch_records")
		for _, c := range []string{"order-decider", "projections.orders", "delivery.fanout", "projections.deliveries"} {
			if batches["consumer="+c] == 0 {
				return fmt.Errorf("pod_consumer_batch_records{consumer=%q} not observed: %v", c, batches)
			}
		}
		// A partition whose end offset a refresh could not read (a topic
		// the cluster made a moment ago, its leader not yet known) has no
		// series until a later refresh reads it.
		ends := series(mfs, "pod_topic_end_offset")
		for _, topic := range schemas.LogicalTopics() { // labels name topics without the prefix
			if !hasLabel(ends, "topic="+topic) {
				return fmt.Errorf("no pod_topic_end_offset for %s", topic)
			}
		}
		return nil
	})

	http := series(mfs, "pod_http_requests_total")
	for _, want := range []string{
		"method=POST,route=/v1/orders/pod,status=201",
		"method=POST,route=/v1/orders/pod,status=400",
		"method=POST,route=/v1/me/webhooks,status=201",
	} {
		if http[want] == 0 {
			t.Errorf("pod_http_requests_total{%s} missing: %v", want, http)
		}
	}
	if series(mfs, "pod_http_request_duration_seconds")["method=POST,route=/v1/orders/pod"] < 4 {
		t.Errorf("POST /v1/orders/pod latency not observed")
	}
	for _, name := range []string{
		"pod_consumer_batch_seconds", "pod_webhook_attempt_duration_seconds", "pod_webhook_event_age_seconds",
		"pod_delivery_poll_records", "pod_topic_end_offset", "pod_lag_refreshed_timestamp_seconds",
		"pod_webhook_auto_disabled_total", "pod_kafka_produce_records_total", "pod_kafka_fetch_records_total",
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if len(series(mfs, name)) == 0 {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	problems, err := testutil.GatherAndLint(d.app.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	// The exported lag is kadm's: once the pipeline is idle (the failing
	// endpoint's retries keep the sender busy, so it is deleted first),
	// a scrape and a direct kadm.Lag agree on every group and partition.
	compareLagWithKadm(t, d)
}

func hasLabel(s map[string]float64, want ...string) bool {
	for k := range s {
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(","+k+",", ","+w+",")
		}
		if ok {
			return true
		}
	}
	return false
}

func compareLagWithKadm(t *testing.T, d demoEnv) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.app.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var list struct {
		Data []webhookJSON `json:"data"`
	}
	d.client.Get("/v1/me/webhooks").JSON(t, &list)
	for _, w := range list.Data {
		if r := d.client.Do("DELETE", "/v1/me/webhooks/"+w.ID.String(), nil); r.Status != 204 {
			t.Fatalf("delete webhook: %d %s", r.Status, r.Body)
		}
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		before := kadmLag(t, adm, d.app.Naming)
		exported := series(scrape(t, d.app.Addr()), "pod_consumer_lag")
		after := kadmLag(t, adm, d.app.Naming)
		if fmt.Sprint(before) != fmt.Sprint(after) {
			return fmt.Errorf("still moving")
		}
		for _, g := range app.ConsumerGroups {
			if !hasLabel(after, "group="+g) {
				return fmt.Errorf("kadm reports no lag for %s", g)
			}
		}
		for k, v := range after {
			if exported[k] != v {
				return fmt.Errorf("%s: exported %v, kadm %v", k, exported[k], v)
			}
		}
		for k := range exported {
			if _, ok := after[k]; !ok {
				return fmt.Errorf("%s exported but not in kadm's answer", k)
			}
		}
		return nil
	})
}

// kadmLag is kadm's lag of every group, keyed like series does (logical
// group and topic names, as the exported series carry them).
func kadmLag(t *testing.T, adm *kadm.Client, n schemas.Naming) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups := make([]string, len(app.ConsumerGroups))
	for i, g := range app.ConsumerGroups {
		groups[i] = n.Group(g)
	}
	lags, err := adm.Lag(ctx, groups...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for g, dl := range lags {
		if err := dl.Error(); err != nil {
			t.Fatalf("lag of %s: %v", g, err)
		}
		for _, m := range dl.Lag.Sorted() {
			out[fmt.Sprintf("group=%s,partition=%d,topic=%s", n.LogicalGroup(g), m.Partition, n.LogicalTopic(m.Topic))] = float64(m.Lag)
		}
	}
	return out
}

// TestRolesWithoutAPIServeMetricsAndProbes: a delivery-only instance
// answers /healthz, /readyz and /metrics (with lag) and nothing else.
func TestRolesWithoutAPIServeMetricsAndProbes(t *testing.T) {
	d := startDemo(t)
	peer, c := d.startPeer(t, func(c *config.Config) {
		c.Roles = []string{config.RoleDelivery}
		c.MetricsRefresh = 200 * time.Millisecond
	})
	if r := c.Get("/healthz"); r.Status != 200 {
		t.Fatalf("healthz: %d", r.Status)
	}
	if r := c.Get("/readyz"); r.Status != 200 {
		t.Fatalf("readyz: %d %s", r.Status, r.Body)
	}
	if r := c.Get("/v1/stores"); r.Status != 404 {
		t.Fatalf("/v1/stores on a delivery-only instance: %d", r.Status)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		lag := series(scrape(t, peer.Addr()), "pod_consumer_lag")
		if !hasLabel(lag, "group=delivery.fanout") {
			return fmt.Errorf("no lag for delivery.fanout yet: %v", lag)
		}
		return nil
	})
	if mfs := scrape(t, peer.Addr()); len(series(mfs, "pod_orders")) != 0 {
		t.Errorf("a delivery-only instance exports pod_orders (counting belongs to the projector role)")
	}
}

// TestProfilerOnlyOnItsOwnListener: with POD_PPROF_ADDR set the profiler
// answers there, and never on the API's listener.
func TestProfilerOnlyOnItsOwnListener(t *testing.T) {
	addr := testenv.FreeAddr(t)
	d := startDemo(t, func(c *config.Config) { c.PprofAddr = addr })
	if r := testenv.NewClient(t, "http://"+addr, "").Get("/debug/pprof/cmdline"); r.Status != 200 || len(r.Body) == 0 {
		t.Fatalf("profiler: %d %q", r.Status, r.Body)
	}
	if r := testenv.NewClient(t, "http://"+d.app.Addr(), "").Get("/debug/pprof/cmdline"); r.Status != 404 {
		t.Fatalf("profiler on the API listener: %d", r.Status)
	}
}

// Requests refused before their handler (no token, a bad method) and
// unknown paths are counted under the route template their path matches,
// or "unmatched", never under the /v1 group.
func TestRefusedRequestsCarryTheirRouteTemplate(t *testing.T) {
	d := startDemo(t)
	anon := testenv.NewClient(t, d.client.Base, "")
	anon.Get("/v1/orders/pod/" + uuid.NewString())
	d.client.Get("/v1/orders/pod/batches")
	d.client.Get("/v1/no/such/path")
	s := series(scrape(t, d.app.Addr()), "pod_http_requests_total")
	for _, want := range []string{
		"method=GET,route=/v1/orders/pod/:order_id,status=401",
		"method=GET,route=/v1/orders/pod/batches,status=405",
		"method=GET,route=unmatched,status=404",
	} {
		if s[want] != 1 {
			t.Errorf("no series %s (have %v)", want, s)
		}
	}
	for k := range s {
		if strings.Contains(k, "route=/v1,") {
			t.Errorf("a request counted under the group: %s", k)
		}
	}
}

// Before any order or delivery, every stage's consumer series and every
// webhook outcome exist at 0, so dashboards show 0 and alerts evaluate,
// not "no data" (a consumer that applied nothing, such as the fulfillment
// bridge, is in the $consumer variable too).
func TestMetricsExistFromStart(t *testing.T) {
	d := startDemo(t)
	mfs := scrape(t, d.app.Addr())
	for _, c := range app.StageConsumers {
		for _, name := range []string{"pod_consumer_records_total", "pod_consumer_batch_failures_total",
			"pod_consumer_dead_letters_total", "pod_consumer_last_progress_timestamp_seconds",
			"pod_consumer_batch_records", "pod_consumer_batch_seconds"} {
			if _, ok := series(mfs, name)["consumer="+c]; !ok {
				t.Errorf("%s{consumer=%q} missing at start", name, c)
			}
		}
	}
	attempts := series(mfs, "pod_webhook_attempts_total")
	for _, outcome := range []string{"success", "retry", "failed", "cancelled", "deferred"} {
		if !hasLabel(attempts, "outcome="+outcome) {
			t.Errorf("pod_webhook_attempts_total{outcome=%q} missing at start (have %v)", outcome, attempts)
		}
	}
}
