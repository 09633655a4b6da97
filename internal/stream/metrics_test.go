package stream

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// histogramQuantile is PromQL's histogram_quantile over one classic
// histogram (promql.BucketQuantile): find the bucket the rank falls in and
// interpolate linearly between its bounds, the lowest bucket starting at 0
// (when its bound is above 0), the +Inf bucket answering the highest finite
// bound.
func histogramQuantile(q float64, h *dto.Histogram) float64 {
	total := float64(h.GetSampleCount())
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range h.GetBucket() {
		upper, count := b.GetUpperBound(), float64(b.GetCumulativeCount())
		if count >= rank {
			return lower + (upper-lower)*(rank-below)/(count-below)
		}
		lower, below = upper, count
	}
	return lower
}

// Batches of one record read 1 at the median, not 0.5 (the lowest bucket
// used to be le=1, which histogram_quantile takes to start at 0), and
// batches of two read 2; every quantile of a run of one size n stays
// within half a record of n.
func TestBatchSizeQuantilesReadTheBatchSize(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	for range 100 {
		m.observeBatch("ones", 1, time.Millisecond)
		m.observeBatch("twos", 2, time.Millisecond)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hists := map[string]*dto.Histogram{}
	for _, mf := range mfs {
		if mf.GetName() != "pod_consumer_batch_records" {
			continue
		}
		for _, s := range mf.GetMetric() {
			hists[s.GetLabel()[0].GetValue()] = s.GetHistogram()
		}
	}
	for consumer, size := range map[string]float64{"ones": 1, "twos": 2} {
		h := hists[consumer]
		if h == nil {
			t.Fatalf("no pod_consumer_batch_records{consumer=%q}", consumer)
		}
		if p50 := histogramQuantile(0.5, h); p50 != size {
			t.Errorf("batches of %v: p50 reads %v", size, p50)
		}
		for _, q := range []float64{0.01, 0.25, 0.75, 0.99} {
			if v := histogramQuantile(q, h); math.Abs(v-size) >= 0.5 {
				t.Errorf("batches of %v: p%v reads %v", size, q*100, v)
			}
		}
	}
}
