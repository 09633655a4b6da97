package app

import (
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// brokerMetrics are the per-broker metrics of every Kafka client of the
// process that kprom does not report the way operators need them:
//
//   - pod_kafka_request_duration_e2e_seconds{client_id, node_id, request}:
//     a request's round trip, write start to read end, by request type
//     (Produce, Fetch, Metadata, …), so produce latency is not mixed with
//     fetches, which a broker holds until records arrive or the client's
//     fetch max wait ends;
//   - pod_kafka_{connect_errors,disconnects,write_errors,read_errors}_total
//     {client_id, node_id}: made at 0 when a client first dials a broker,
//     so they exist before the first error (kprom makes its own on the
//     first error only; those are left out of the registry).
//
// The vectors are shared by every client of the process, labelled with the
// client's id; a client's series outlive it, and the next client with the
// same id (a consumer's next group session) goes on counting in them.
type brokerMetrics struct {
	requests      *prometheus.HistogramVec
	connectErrors *prometheus.CounterVec
	disconnects   *prometheus.CounterVec
	writeErrors   *prometheus.CounterVec
	readErrors    *prometheus.CounterVec
}

// brokerRequestBuckets span a local broker's sub-millisecond answers up to
// a fetch held for its whole wait and a slow produce to a real cluster.
var brokerRequestBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// kpromReplaced are the kprom metric names brokerMetrics reports instead.
var kpromReplaced = []string{
	"pod_kafka_request_duration_e2e_seconds",
	"pod_kafka_connect_errors_total",
	"pod_kafka_disconnects_total",
	"pod_kafka_write_errors_total",
	"pod_kafka_read_errors_total",
}

func newBrokerMetrics(reg prometheus.Registerer) *brokerMetrics {
	broker := []string{"client_id", "node_id"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, broker)
	}
	m := &brokerMetrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pod_kafka_request_duration_e2e_seconds",
			Help:    "Round trip of a request to a broker, from the start of its write to the end of its response's read, by client, broker and request type. A Fetch includes the time the broker holds it waiting for records (up to the client's fetch max wait).",
			Buckets: brokerRequestBuckets,
		}, []string{"client_id", "node_id", "request"}),
		connectErrors: counter("pod_kafka_connect_errors_total", "Connections to a broker that failed, by client and broker."),
		disconnects:   counter("pod_kafka_disconnects_total", "Connections to a broker that were closed, by client and broker."),
		writeErrors:   counter("pod_kafka_write_errors_total", "Requests that could not be written to a broker, by client and broker."),
		readErrors:    counter("pod_kafka_read_errors_total", "Responses that could not be read from a broker, by client and broker."),
	}
	reg.MustRegister(m.requests, m.connectErrors, m.disconnects, m.writeErrors, m.readErrors)
	return m
}

// hook is the kgo hook of the client clientID.
func (m *brokerMetrics) hook(clientID string) kgo.Hook { return brokerHook{m: m, client: clientID} }

type brokerHook struct {
	m      *brokerMetrics
	client string
}

var (
	_ kgo.HookBrokerConnect    = brokerHook{}
	_ kgo.HookBrokerDisconnect = brokerHook{}
	_ kgo.HookBrokerE2E        = brokerHook{}
)

// OnBrokerConnect makes the client's error series for the broker (at 0) and
// counts a failed dial.
func (h brokerHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	node := kgo.NodeName(meta.NodeID)
	connectErrors := h.m.connectErrors.WithLabelValues(h.client, node)
	h.m.disconnects.WithLabelValues(h.client, node)
	h.m.writeErrors.WithLabelValues(h.client, node)
	h.m.readErrors.WithLabelValues(h.client, node)
	if err != nil {
		connectErrors.Inc()
	}
}

func (h brokerHook) OnBrokerDisconnect(meta kgo.BrokerMetadata, _ net.Conn) {
	h.m.disconnects.WithLabelValues(h.client, kgo.NodeName(meta.NodeID)).Inc()
}

// OnBrokerE2E times a request that was written and answered, or counts the
// write or read that failed.
func (h brokerHook) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	node := kgo.NodeName(meta.NodeID)
	switch {
	case e2e.WriteErr != nil:
		h.m.writeErrors.WithLabelValues(h.client, node).Inc()
	case e2e.ReadErr != nil:
		h.m.readErrors.WithLabelValues(h.client, node).Inc()
	default:
		// kmsg names every request type of the protocol ("Produce",
		// "Fetch"), and any other key "Unknown": the label stays small.
		h.m.requests.WithLabelValues(h.client, node, kmsg.NameForKey(key)).Observe(e2e.DurationE2E().Seconds())
	}
}

// replacedByBrokerMetrics reports whether a kprom collector is one of the
// metrics brokerMetrics reports instead.
func replacedByBrokerMetrics(c prometheus.Collector) bool {
	return describesAny(c, func(fqName string) bool {
		for _, n := range kpromReplaced {
			if fqName == n {
				return true
			}
		}
		return false
	})
}

// describesAny reports whether any of c's descriptors has a name match
// accepts.
func describesAny(c prometheus.Collector, match func(fqName string) bool) bool {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	found := false
	for d := range ch {
		s := d.String()
		_, rest, ok := strings.Cut(s, `fqName: "`)
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, `"`)
		found = found || match(name)
	}
	return found
}
