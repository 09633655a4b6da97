package stream

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the consumer loop, labelled by consumer name.
type Metrics struct {
	batchRecords  *prometheus.HistogramVec
	batchSeconds  *prometheus.HistogramVec
	records       *prometheus.CounterVec
	batchFailures *prometheus.CounterVec
	deadLetters   *prometheus.CounterVec
	lastProgress  *prometheus.GaugeVec
}

// NewMetrics registers the consumer loop metrics on reg:
//   - pod_consumer_batch_records: records applied per batch
//   - pod_consumer_batch_seconds: time to apply and commit one batch
//   - pod_consumer_records_total: records applied
//   - pod_consumer_batch_failures_total: failed attempts to apply a batch
//   - pod_consumer_dead_letters_total: records moved to the dead-letter topic
//   - pod_consumer_last_progress_timestamp_seconds: when the consumer last
//     applied or dead-lettered a batch, or polled and found nothing to do
//
// Each consumer's series exist from the moment Runner.Run starts it (the
// counters at 0), so alerts on increase() work from the first scrape.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		batchRecords: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pod_consumer_batch_records",
			Help:    "Records applied per batch, by consumer.",
			Buckets: []float64{1, 5, 10, 50, 100, 250, 500, 1000},
		}, []string{"consumer"}),
		batchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pod_consumer_batch_seconds",
			Help:    "Time to apply and commit one batch, by consumer.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"consumer"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pod_consumer_records_total",
			Help: "Records applied, by consumer.",
		}, []string{"consumer"}),
		batchFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pod_consumer_batch_failures_total",
			Help: "Failed attempts to apply a batch (each is retried), by consumer.",
		}, []string{"consumer"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pod_consumer_dead_letters_total",
			Help: "Records moved to the consumer's dead-letter topic because they can never be applied, by consumer.",
		}, []string{"consumer"}),
		lastProgress: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pod_consumer_last_progress_timestamp_seconds",
			Help: "Unix time the consumer last applied or dead-lettered records, or found nothing to do, by consumer.",
		}, []string{"consumer"}),
	}
	reg.MustRegister(m.batchRecords, m.batchSeconds, m.records, m.batchFailures, m.deadLetters, m.lastProgress)
	return m
}

func (m *Metrics) observeBatch(consumer string, n int, d time.Duration) {
	if m == nil {
		return
	}
	m.batchRecords.WithLabelValues(consumer).Observe(float64(n))
	m.batchSeconds.WithLabelValues(consumer).Observe(d.Seconds())
	m.records.WithLabelValues(consumer).Add(float64(n))
	m.progress(consumer)
}

// start creates consumer's series: counters at 0, progress now (it just
// started; it goes stale only if it then makes none).
func (m *Metrics) start(consumer string) {
	if m == nil {
		return
	}
	m.batchRecords.WithLabelValues(consumer)
	m.batchSeconds.WithLabelValues(consumer)
	m.records.WithLabelValues(consumer).Add(0)
	m.batchFailures.WithLabelValues(consumer).Add(0)
	m.deadLetters.WithLabelValues(consumer).Add(0)
	m.progress(consumer)
}

func (m *Metrics) progress(consumer string) {
	if m == nil {
		return
	}
	m.lastProgress.WithLabelValues(consumer).SetToCurrentTime()
}

func (m *Metrics) observeDeadLetter(consumer string) {
	if m == nil {
		return
	}
	m.deadLetters.WithLabelValues(consumer).Inc()
	m.progress(consumer)
}

// CountDeadLetters makes consumer's pod_consumer_dead_letters_total exist
// at 0, for a consumer that is not run by a Runner (the webhook sender) but
// dead-letters records all the same.
func (m *Metrics) CountDeadLetters(consumer string) {
	if m == nil {
		return
	}
	m.deadLetters.WithLabelValues(consumer).Add(0)
}

// DeadLettered counts one record such a consumer dead-lettered.
func (m *Metrics) DeadLettered(consumer string) {
	if m == nil {
		return
	}
	m.deadLetters.WithLabelValues(consumer).Inc()
}

func (m *Metrics) observeFailure(consumer string) {
	if m == nil {
		return
	}
	m.batchFailures.WithLabelValues(consumer).Inc()
}
