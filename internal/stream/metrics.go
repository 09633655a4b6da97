package stream

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CountBuckets are the buckets of every histogram of a number of records
// (records per batch here, tasks per poll in the webhook sender).
//
// Counts are whole numbers, and each bound lies halfway between two of
// them. histogram_quantile interpolates linearly inside the bucket the
// quantile falls in, and takes the lowest bucket to start at 0: with a
// first bound of 1, a run of single-record batches read 0.5 at the median.
// Here a batch of 1 falls in (0.5, 1.5] and a batch of 2 in (1.5, 2.5], so
// a run of either reads exactly 1 or 2 at the median, and no quantile of
// batches of one size n is as far as half a record from n. Beyond 2 the
// buckets widen (3–5, 6–10, …) and quantiles there are interpolated.
var CountBuckets = []float64{0.5, 1.5, 2.5, 5.5, 10.5, 20.5, 50.5, 100.5, 250.5, 500.5, 1000.5}

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
			Buckets: CountBuckets,
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
