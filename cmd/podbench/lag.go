package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// lagMetric is the per-partition consumer lag podsvc exports on /metrics:
// pod_consumer_lag{group,topic,partition}.
const lagMetric = "pod_consumer_lag"

// lagScraper reads podsvc's /metrics every second and keeps, per consumer
// group, the largest total lag (summed over topics and partitions) seen.
type lagScraper struct {
	url string
	hc  *http.Client

	mu      sync.Mutex
	found   bool
	maxLag  map[string]float64
	scrapes int
	fails   int
}

func newLagScraper(base string) *lagScraper {
	return &lagScraper{url: base + "/metrics", hc: &http.Client{Timeout: 2 * time.Second}, maxLag: map[string]float64{}}
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
		s.maxLag[g] = max(s.maxLag[g], v)
	}
}

// parseLag sums pod_consumer_lag samples per group from the Prometheus text
// format.
func parseLag(r io.Reader) (map[string]float64, bool) {
	sums := map[string]float64{}
	found := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, lagMetric)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue // another metric, e.g. pod_consumer_lag_seconds
		}
		found = true
		labels, value := "", rest
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			labels, value = rest[1:end], rest[end+1:]
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sums[labelValue(labels, "group")] += v
	}
	return sums, found
}

// labelValue finds name="value" in a label list (values of group names
// hold no escaped quotes).
func labelValue(labels, name string) string {
	for _, part := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
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
