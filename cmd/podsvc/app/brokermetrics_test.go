package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A producer's and a consumer's requests are timed apart by request type,
// so a fetch held by the broker for its max wait never shows as produce
// latency; and each client's connection and I/O error counters exist at 0
// once it dialled a broker, before any error. kprom's own versions of these
// metrics stay out of the registry.
func TestBrokerMetricsSeparateRequestTypesAndExistBeforeErrors(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	a := &App{Registry: prometheus.NewRegistry()}
	a.brokerMetrics = newBrokerMetrics(a.Registry)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	producer, err := kgo.NewClient(append(a.kafkaMetrics("producer"), kgo.SeedBrokers(cluster.ListenAddrs()...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if err := producer.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	consumer, err := kgo.NewClient(append(a.kafkaMetrics("reader"), kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	if fs := consumer.PollFetches(ctx); fs.NumRecords() != 1 {
		t.Fatalf("polled %d records (%v)", fs.NumRecords(), fs.Errors())
	}
	// A second poll finds nothing: the broker holds the fetch for its wait.
	pollCtx, pollCancel := context.WithTimeout(ctx, time.Second)
	consumer.PollFetches(pollCtx)
	pollCancel()

	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		families[mf.GetName()] = mf
	}
	requests := map[string]*dto.Histogram{} // client/request
	for _, m := range families["pod_kafka_request_duration_e2e_seconds"].GetMetric() {
		l := labels(m)
		requests[l["client_id"]+"/"+l["request"]] = m.GetHistogram()
	}
	for _, want := range []string{"producer/Produce", "reader/Fetch", "producer/Metadata"} {
		if requests[want].GetSampleCount() == 0 {
			t.Errorf("no request_duration series for %s (have %v)", want, keys(requests))
		}
	}
	if h := requests["reader/Fetch"]; h != nil && h.GetSampleSum()/float64(h.GetSampleCount()) < 0.05 {
		t.Errorf("the fetches' mean round trip is %.3fs: the empty fetch's wait is missing", h.GetSampleSum()/float64(h.GetSampleCount()))
	}
	for _, name := range []string{"pod_kafka_connect_errors_total", "pod_kafka_disconnects_total",
		"pod_kafka_write_errors_total", "pod_kafka_read_errors_total"} {
		clients := map[string]bool{}
		for _, m := range families[name].GetMetric() {
			clients[labels(m)["client_id"]] = true
			if v := m.GetCounter().GetValue(); v != 0 && name != "pod_kafka_disconnects_total" {
				t.Errorf("%s%v = %v with no error", name, labels(m), v)
			}
		}
		if !clients["producer"] || !clients["reader"] {
			t.Errorf("%s exists for clients %v, want producer and reader", name, clients)
		}
	}
	for name, mf := range families {
		if strings.HasPrefix(name, "pod_kafka_buffered_") && strings.HasSuffix(name, "_records_total") {
			t.Errorf("kprom's misnamed gauge %s is registered (%d series)", name, len(mf.GetMetric()))
		}
	}
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
