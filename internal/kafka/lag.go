package kafka

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/printpod/pod/internal/periodic"
	"github.com/printpod/pod/schemas"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Lag exports, for Prometheus, how far every consumer group is behind on
// every partition it reads, and the end offset of every topic. The numbers
// come from the brokers through kadm (group descriptions, committed offsets
// and listed end offsets), refreshed in the background by Run, so a scrape
// never waits on Kafka:
//   - pod_consumer_lag{group, topic, partition}: records not yet committed
//   - pod_topic_end_offset{topic, partition}: the log end offset
//   - pod_lag_refresh_errors_total: refreshes that failed in part or whole
//   - pod_lag_refreshed_timestamp_seconds: when the last refresh that read
//     every group's lag and every end offset finished
//
// A group whose lag cannot be read keeps its previous values, so a broker
// hiccup does not look like a lag of zero.
type Lag struct {
	Admin  *kadm.Client
	Groups []string // consumer groups to report
	Topics []string // topics whose end offsets to report
	Log    *slog.Logger
	// Naming, when set, turns the cluster's group and topic names back into
	// logical ones for the labels, so dashboards and alerts read the same
	// in every environment sharing a cluster.
	Naming schemas.Naming

	lagDesc, endDesc *prometheus.Desc
	errors           prometheus.Counter
	refreshed        prometheus.Gauge

	mu   sync.Mutex
	lags map[string][]lagPoint // by group
	ends []endPoint
}

type lagPoint struct {
	topic     string
	partition int32
	lag       int64
}

type endPoint struct {
	topic     string
	partition int32
	offset    int64
}

// NewLag registers the lag collector on reg.
func NewLag(reg prometheus.Registerer, adm *kadm.Client, groups, topics []string, log *slog.Logger) *Lag {
	l := &Lag{
		Admin: adm, Groups: groups, Topics: topics, Log: log,
		lagDesc: prometheus.NewDesc("pod_consumer_lag",
			"Records on a partition not yet committed by a consumer group (end offset minus committed offset), read through kadm.",
			[]string{"group", "topic", "partition"}, nil),
		endDesc: prometheus.NewDesc("pod_topic_end_offset",
			"Log end offset of a topic partition (the offset the next record will get).",
			[]string{"topic", "partition"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pod_lag_refresh_errors_total",
			Help: "Refreshes of consumer lag and end offsets that failed in part or in whole.",
		}),
		refreshed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pod_lag_refreshed_timestamp_seconds",
			Help: "Unix time at which consumer lag and end offsets were last refreshed in full (a refresh that failed in part leaves it).",
		}),
		lags: map[string][]lagPoint{},
	}
	// Staleness counts from the process's start until a first refresh
	// has read everything: read as 0, a new instance looked decades stale.
	l.refreshed.SetToCurrentTime()
	reg.MustRegister(l, l.errors, l.refreshed)
	return l
}

// Describe implements prometheus.Collector.
func (l *Lag) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.lagDesc
	ch <- l.endDesc
}

// Collect implements prometheus.Collector with the last refreshed values.
func (l *Lag) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for group, points := range l.lags {
		for _, p := range points {
			ch <- prometheus.MustNewConstMetric(l.lagDesc, prometheus.GaugeValue, float64(p.lag),
				l.Naming.LogicalGroup(group), l.Naming.LogicalTopic(p.topic), strconv.Itoa(int(p.partition)))
		}
	}
	for _, e := range l.ends {
		ch <- prometheus.MustNewConstMetric(l.endDesc, prometheus.GaugeValue, float64(e.offset),
			l.Naming.LogicalTopic(e.topic), strconv.Itoa(int(e.partition)))
	}
}

// Run refreshes every interval until ctx ends.
func (l *Lag) Run(ctx context.Context, interval time.Duration) {
	periodic.Run(ctx, interval, func(ctx context.Context) {
		rctx, cancel := context.WithTimeout(ctx, interval+5*time.Second)
		defer cancel()
		if err := l.Refresh(rctx); err != nil && ctx.Err() == nil {
			l.Log.Warn("refreshing consumer lag failed", "err", err)
		}
	})
}

// Refresh reads lag and end offsets once. It returns the first error; what
// could be read is kept either way.
func (l *Lag) Refresh(ctx context.Context) error {
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	lags := map[string][]lagPoint{}
	// kadm's Lag reuses the slice it is given as scratch space: hand it a
	// copy, never the caller's (shared) list.
	described, err := l.Admin.Lag(ctx, slices.Clone(l.Groups)...)
	if err != nil {
		fail(err)
	}
	for group, dl := range described {
		if err := dl.Error(); err != nil {
			if errors.Is(err, kerr.GroupIDNotFound) {
				lags[group] = nil // not started anywhere yet (or deleted)
			} else {
				fail(err)
			}
			continue
		}
		points := []lagPoint{}
		for _, m := range dl.Lag.Sorted() {
			if m.Err != nil || m.Lag < 0 {
				if m.Err != nil {
					fail(m.Err)
				}
				continue
			}
			points = append(points, lagPoint{topic: m.Topic, partition: m.Partition, lag: m.Lag})
		}
		lags[group] = points
	}
	var ends []endPoint
	listed, err := l.Admin.ListEndOffsets(ctx, l.Topics...)
	if err != nil {
		fail(err)
	} else {
		listed.Each(func(o kadm.ListedOffset) {
			if o.Err != nil {
				fail(o.Err)
				return
			}
			ends = append(ends, endPoint{topic: o.Topic, partition: o.Partition, offset: o.Offset})
		})
	}

	l.mu.Lock()
	for group, points := range lags {
		l.lags[group] = points
	}
	l.ends = mergeEnds(l.ends, ends)
	l.mu.Unlock()
	// The time is that of the last refresh that read everything: one that
	// failed in part keeps the figures it could not read as they were, and
	// must not make them look fresh (found by review: with the brokers'
	// admin APIs unreachable, the stale-lag alert could never fire).
	if firstErr != nil {
		l.errors.Inc()
	} else {
		l.refreshed.SetToCurrentTime()
	}
	return firstErr
}

// mergeEnds is old with every partition read now replaced: a partition
// whose end offset could not be read keeps its last value.
func mergeEnds(old, now []endPoint) []endPoint {
	type key struct {
		topic     string
		partition int32
	}
	at := map[key]int{}
	out := append([]endPoint(nil), old...)
	for i, e := range out {
		at[key{e.topic, e.partition}] = i
	}
	for _, e := range now {
		if i, ok := at[key{e.topic, e.partition}]; ok {
			out[i] = e
		} else {
			at[key{e.topic, e.partition}] = len(out)
			out = append(out, e)
		}
	}
	return out
}
