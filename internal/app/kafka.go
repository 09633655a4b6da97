package app

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// kafkaMetrics gives a client its id and kprom hooks registered on the app's
// registry; each client has its own hooks (kprom unregisters them on close).
// Records and batches are counted besides bytes, by node and topic, and
// request round trips are timed.
func (a *App) kafkaMetrics(clientID string) []kgo.Opt {
	m := kprom.NewMetrics("pod_kafka", kprom.Registerer(withoutMisnamed{a.Registry}), kprom.WithClientLabel(),
		kprom.FetchAndProduceDetail(kprom.ByNode, kprom.ByTopic, kprom.Records, kprom.Batches, kprom.UncompressedBytes),
		kprom.Histograms(kprom.RequestDurationE2E))
	return []kgo.Opt{kgo.ClientID(clientID), kgo.WithHooks(m)}
}

// groupMember is kafkaMetrics plus the group timing of every consumer-group
// member: a session of POD_KAFKA_SESSION_TIMEOUT, heartbeats at most a
// second apart, so the survivors of a killed process learn of the
// rebalance within a second of its session's end.
func (a *App) groupMember(clientID string) []kgo.Opt {
	session := a.Config.KafkaSessionTimeout
	return append(a.kafkaMetrics(clientID), kgo.SessionTimeout(session), kgo.HeartbeatInterval(min(time.Second, session/3)))
}

// registerProducerBuffer exports how many records the shared producer holds
// that the brokers have not acknowledged yet.
func (a *App) registerProducerBuffer() {
	a.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pod_kafka_producer_buffered_records",
		Help: "Records buffered in the shared producer, not yet acknowledged by the brokers.",
	}, func() float64 { return float64(a.Producer.BufferedProduceRecords()) }))
}

// withoutMisnamed leaves out kprom's two gauges whose names end in _total
// (pod_kafka_buffered_{produce,fetch}_records_total), which promlint
// rightly rejects: a gauge must not look like a counter. The producer's
// buffer is exported as pod_kafka_producer_buffered_records instead.
type withoutMisnamed struct{ prometheus.Registerer }

func (r withoutMisnamed) Register(c prometheus.Collector) error {
	if misnamedGauge(c) {
		return nil
	}
	return r.Registerer.Register(c)
}

func (r withoutMisnamed) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r withoutMisnamed) Unregister(c prometheus.Collector) bool {
	if misnamedGauge(c) {
		return true
	}
	return r.Registerer.Unregister(c)
}

func misnamedGauge(c prometheus.Collector) bool {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	bad := false
	for d := range ch {
		s := d.String()
		bad = bad || strings.Contains(s, `fqName: "pod_kafka_buffered_`) && strings.Contains(s, `_records_total"`)
	}
	return bad
}
