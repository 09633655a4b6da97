package delivery

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the delivery role. A nil *Metrics records nothing.
type Metrics struct {
	outcomes *prometheus.CounterVec
	duration prometheus.Histogram
	disabled prometheus.Counter
}

// NewMetrics registers the delivery metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pod_webhook_attempts_total",
			Help: "Webhook delivery attempts by outcome (success, retry, failed, cancelled).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pod_webhook_attempt_duration_seconds",
			Help:    "Duration of webhook delivery requests, from dial to the end of the response.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15},
		}),
		disabled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pod_webhook_auto_disabled_total",
			Help: "Webhooks disabled automatically after consecutive failed deliveries.",
		}),
	}
	reg.MustRegister(m.outcomes, m.duration, m.disabled)
	return m
}

func (m *Metrics) outcome(o string) {
	if m != nil {
		m.outcomes.WithLabelValues(o).Inc()
	}
}

func (m *Metrics) observeAttempt(d time.Duration) {
	if m != nil {
		m.duration.Observe(d.Seconds())
	}
}

func (m *Metrics) autoDisabled() {
	if m != nil {
		m.disabled.Inc()
	}
}
