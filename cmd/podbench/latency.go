package main

import (
	"math"
	"slices"
	"sync"
	"time"
)

// latencies records durations and answers exact percentiles (nearest rank
// over a sorted copy). A run holds at most a few hundred thousand samples,
// so keeping them all is cheap and needs no bucketing.
type latencies struct {
	mu sync.Mutex
	v  []float64 // milliseconds
}

func (l *latencies) add(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	l.mu.Lock()
	l.v = append(l.v, ms)
	l.mu.Unlock()
}

// summary is the percentiles of a set of latencies, in milliseconds.
type summary struct {
	N    int
	P50  float64
	P95  float64
	P99  float64
	Max  float64
	Mean float64
}

func (l *latencies) summary() summary {
	l.mu.Lock()
	v := slices.Clone(l.v)
	l.mu.Unlock()
	return summarize(v)
}

func summarize(v []float64) summary {
	if len(v) == 0 {
		return summary{}
	}
	slices.Sort(v)
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return summary{N: len(v), P50: rank(v, 50), P95: rank(v, 95), P99: rank(v, 99), Max: v[len(v)-1], Mean: sum / float64(len(v))}
}

// rank is the nearest-rank percentile p of sorted v.
func rank(v []float64, p float64) float64 {
	i := int(math.Ceil(p/100*float64(len(v)))) - 1
	return v[max(0, min(i, len(v)-1))]
}
