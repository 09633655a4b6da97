package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// lagMetric is the per-partition consumer lag podsvc exports on /metrics:
// pod_consumer_lag{group,topic,partition}.
const lagMetric = "pod_consumer_lag"

// lagScraper reads podsvc's /metrics every second and keeps, per consumer
// group, the largest total lag (summed over topics and partitions) seen.
type lagScraper struct {
	url         string
	groupPrefix string // the run's group prefix on a shared cluster, left out of the report's names
	hc          *http.Client

	mu      sync.Mutex
	found   bool
	maxLag  map[string]float64
	scrapes int
	fails   int
}

func newLagScraper(base, groupPrefix string) *lagScraper {
	return &lagScraper{url: base + "/metrics", groupPrefix: groupPrefix, hc: &http.Client{Timeout: 2 * time.Second}, maxLag: map[string]float64{}}
}

func (s *lagScraper) run(ctx context.Context) { everySecond(ctx, func() { s.scrape(ctx) }) }

func (s *lagScraper) scrape(ctx context.Context) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	resp, err := s.hc.Do(req)
	if err != nil {
		s.mu.Lock()
		s.fails++
		s.mu.Unlock()
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return
	}
	sums, found := parseLag(resp.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scrapes++
	if !found {
		return
	}
	s.found = true
	for g, v := range sums {
		g = strings.TrimPrefix(g, s.groupPrefix)
		s.maxLag[g] = max(s.maxLag[g], v)
	}
}

// parseLag sums pod_consumer_lag samples per group from the Prometheus text
// format (what parsed before a malformed line, if any, still counts).
func parseLag(r io.Reader) (map[string]float64, bool) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, _ := parser.TextToMetricFamilies(r)
	mf := mfs[lagMetric]
	if mf == nil || len(mf.GetMetric()) == 0 {
		return map[string]float64{}, false
	}
	sums := map[string]float64{}
	for _, m := range mf.GetMetric() {
		v := m.GetGauge().GetValue()
		if m.Gauge == nil {
			v = m.GetUntyped().GetValue()
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == "group" {
				sums[l.GetValue()] += v
			}
		}
	}
	return sums, true
}

// lagReport is the largest lag seen per group; Found is false when podsvc
// exports no pod_consumer_lag.
type lagReport struct {
	Found  bool
	MaxLag map[string]float64
}

func (s *lagScraper) report() lagReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := lagReport{Found: s.found, MaxLag: map[string]float64{}}
	for g, v := range s.maxLag {
		out.MaxLag[g] = v
	}
	return out
}
