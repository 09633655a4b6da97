package delivery

import (
	"strconv"
	"strings"
	"time"

	"github.com/printpod/pod/internal/stream"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the delivery role. A nil *Metrics records nothing.
//   - pod_webhook_attempts_total{outcome, status_class}
//   - pod_webhook_attempt_duration_seconds
//   - pod_webhook_event_age_seconds: fan-out of the event to its successful delivery
//   - pod_webhook_auto_disabled_total
//   - pod_delivery_poll_records, pod_delivery_buffered_records,
//     pod_delivery_requests_in_flight: the sender's intake and work in hand
type Metrics struct {
	outcomes *prometheus.CounterVec
	duration prometheus.Histogram
	age      prometheus.Histogram
	disabled prometheus.Counter
	polled   prometheus.Histogram
	buffered prometheus.Gauge
	inFlight prometheus.Gauge
}

// Status classes of an attempt, beside the HTTP classes 2xx..5xx.
const (
	ClassTimeout  = "timeout"  // no response within the deadline
	ClassNetwork  = "network"  // connection refused, reset, closed, DNS
	ClassRefused  = "refused"  // the URL guard refused the target
	ClassUnsigned = "unsigned" // the request could not be signed (FailureUnsigned)
	ClassNone     = "none"     // no request was made (cancelled, deferred)
)

// NewMetrics registers the delivery metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pod_webhook_attempts_total",
			Help: "Webhook delivery attempts by outcome (success, retry, failed, cancelled, deferred) and status class (2xx..5xx, timeout, network, refused, none).",
		}, []string{"outcome", "status_class"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pod_webhook_attempt_duration_seconds",
			Help:    "Duration of webhook delivery requests, from dial to the end of the response.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15},
		}),
		age: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pod_webhook_event_age_seconds",
			Help:    "Time from a delivery's creation (the fan-out of its event) to its successful attempt, retries included.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 43200, 86400},
		}),
		disabled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pod_webhook_auto_disabled_total",
			Help: "Webhooks disabled automatically after consecutive failed deliveries.",
		}),
		polled: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pod_delivery_poll_records",
			Help:    "Delivery tasks taken per poll by the sender.",
			Buckets: stream.CountBuckets,
		}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pod_delivery_buffered_records",
			Help: "Delivery tasks held in memory by the sender (waiting, parked or in flight).",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pod_delivery_requests_in_flight",
			Help: "Webhook requests being made.",
		}),
	}
	reg.MustRegister(m.outcomes, m.duration, m.age, m.disabled, m.polled, m.buffered, m.inFlight)
	// Every outcome has series from the start (at 0), so dashboards and
	// alerts read 0, not "no data", before the first attempt.
	failures := []string{"3xx", "4xx", "5xx", ClassTimeout, ClassNetwork, ClassRefused, ClassUnsigned}
	m.outcomes.WithLabelValues("success", "2xx")
	for _, class := range failures {
		m.outcomes.WithLabelValues("retry", class)
		m.outcomes.WithLabelValues("failed", class)
	}
	m.outcomes.WithLabelValues("cancelled", ClassNone)
	m.outcomes.WithLabelValues("deferred", ClassNone)
	return m
}

// statusClass names the class of an attempt's answer: "2xx".."5xx" when an
// HTTP status came back, else what went wrong.
func statusClass(code int, failure string) string {
	switch {
	case code >= 100 && code < 600:
		return strconv.Itoa(code/100) + "xx"
	case strings.HasPrefix(failure, "timeout"):
		return ClassTimeout
	case strings.HasPrefix(failure, "refused"):
		return ClassRefused
	case failure == FailureUnsigned:
		return ClassUnsigned
	default:
		return ClassNetwork
	}
}

func (m *Metrics) outcome(o, class string) {
	if m != nil {
		m.outcomes.WithLabelValues(o, class).Inc()
	}
}

func (m *Metrics) observeAttempt(d time.Duration) {
	if m != nil {
		m.duration.Observe(d.Seconds())
	}
}

func (m *Metrics) observeDelivered(age time.Duration) {
	if m != nil {
		m.age.Observe(age.Seconds())
	}
}

func (m *Metrics) autoDisabled() {
	if m != nil {
		m.disabled.Inc()
	}
}

func (m *Metrics) observePoll(n int) {
	if m != nil && n > 0 {
		m.polled.Observe(float64(n))
	}
}

func (m *Metrics) setBuffered(n int) {
	if m != nil {
		m.buffered.Set(float64(n))
	}
}

func (m *Metrics) addInFlight(n int) {
	if m != nil {
		m.inFlight.Add(float64(n))
	}
}
