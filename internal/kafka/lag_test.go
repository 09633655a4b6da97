package kafka

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

type lagFixture struct {
	cluster *kfake.Cluster
	cl      *kgo.Client
	adm     *kadm.Client
}

// newLagFixture starts a broker with topic "t" of 3 partitions holding
// 10, 20 and 30 records.
func newLagFixture(t *testing.T) lagFixture {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	f := lagFixture{cluster: cluster, cl: cl, adm: kadm.NewClient(cl)}
	ctx := context.Background()
	if _, err := f.adm.CreateTopic(ctx, 3, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	for p, n := range []int{10, 20, 30} {
		f.produce(t, int32(p), n)
	}
	return f
}

func (f lagFixture) produce(t *testing.T, partition int32, n int) {
	t.Helper()
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		recs = append(recs, &kgo.Record{Topic: "t", Partition: partition, Value: []byte("x")})
	}
	if err := f.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func (f lagFixture) commit(t *testing.T, group string, at map[int32]int64) {
	t.Helper()
	offs := kadm.Offsets{}
	for p, o := range at {
		offs.Add(kadm.Offset{Topic: "t", Partition: p, At: o, LeaderEpoch: -1})
	}
	if err := f.adm.CommitAllOffsets(context.Background(), group, offs); err != nil {
		t.Fatal(err)
	}
}

// exported is what the collector exposes, as "name{labels} value" lines.
func exported(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(labels, ",")] = m.GetGauge().GetValue()
		}
	}
	return out
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestLagIsEndMinusCommittedPerPartition(t *testing.T) {
	f := newLagFixture(t)
	// Group "idle" committed part of the log and has no members.
	f.commit(t, "idle", map[int32]int64{0: 4, 1: 20, 2: 25})

	// Group "live" is a running member that consumed and committed all 60.
	live, err := kgo.NewClient(kgo.SeedBrokers(f.cluster.ListenAddrs()...), kgo.ConsumerGroup("live"),
		kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for seen := 0; seen < 60; {
		fs := live.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of 60: %v", seen, err)
		}
		seen += fs.NumRecords()
		if err := live.CommitRecords(ctx, fs.Records()...); err != nil {
			t.Fatal(err)
		}
	}
	// Seven more on partition 0 that "live" has not consumed yet.
	f.produce(t, 0, 7)

	reg := prometheus.NewRegistry()
	lag := NewLag(reg, f.adm, []string{"idle", "live", "never-existed"}, []string{"t"}, quietLog())
	if err := lag.Refresh(ctx); err != nil {
		t.Fatal(err)
	}

	want := map[string]float64{
		"group=idle,partition=0,topic=t": 17 - 4, // 10 + 7 produced later
		"group=idle,partition=1,topic=t": 0,
		"group=idle,partition=2,topic=t": 30 - 25,
		"group=live,partition=0,topic=t": 7,
		"group=live,partition=1,topic=t": 0,
		"group=live,partition=2,topic=t": 0,
	}
	got := exported(t, reg, "pod_consumer_lag")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pod_consumer_lag:\n got %v\nwant %v", got, want)
	}

	// The same numbers straight from kadm.
	direct, err := f.adm.Lag(ctx, "idle", "live")
	if err != nil {
		t.Fatal(err)
	}
	for group, dl := range direct {
		for _, m := range dl.Lag.Sorted() {
			key := fmt.Sprintf("group=%s,partition=%d,topic=%s", group, m.Partition, m.Topic)
			if got[key] != float64(m.Lag) {
				t.Errorf("%s: exported %v, kadm.Lag says %d", key, got[key], m.Lag)
			}
		}
	}

	ends := exported(t, reg, "pod_topic_end_offset")
	wantEnds := map[string]float64{"partition=0,topic=t": 17, "partition=1,topic=t": 20, "partition=2,topic=t": 30}
	if fmt.Sprint(ends) != fmt.Sprint(wantEnds) {
		t.Fatalf("pod_topic_end_offset:\n got %v\nwant %v", ends, wantEnds)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %v", problems, err)
	}
}

func TestLagKeepsLastValuesWhenTheBrokerIsGone(t *testing.T) {
	f := newLagFixture(t)
	f.commit(t, "g", map[int32]int64{0: 1, 1: 2, 2: 3})
	reg := prometheus.NewRegistry()
	lag := NewLag(reg, f.adm, []string{"g"}, []string{"t"}, quietLog())
	ctx := context.Background()
	if err := lag.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	before := exported(t, reg, "pod_consumer_lag")
	if len(before) != 3 {
		t.Fatalf("want 3 series, got %v", before)
	}
	refreshed := testutil.ToFloat64(lag.refreshed)
	if refreshed == 0 {
		t.Fatal("a refresh that read everything left no time")
	}

	f.cluster.Close()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := lag.Refresh(short); err == nil {
		t.Fatal("refresh against a closed broker succeeded")
	}
	if after := exported(t, reg, "pod_consumer_lag"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("values changed after a failed refresh:\n before %v\n after %v", before, after)
	}
	if n := testutil.ToFloat64(lag.errors); n != 1 {
		t.Fatalf("pod_lag_refresh_errors_total = %v, want 1", n)
	}
	// The figures kept are as old as the last refresh that read them, and
	// say so: the stale-lag alert reads this time (found by review: a
	// failed refresh set it too, and that alert could never fire).
	if now := testutil.ToFloat64(lag.refreshed); now != refreshed {
		t.Fatalf("pod_lag_refreshed_timestamp_seconds moved from %v to %v with a failed refresh", refreshed, now)
	}
}

// TestLagLeavesTheGroupListAlone: kadm's Lag writes into the slice of
// groups it is passed; the collector's list (shared with its owner) must
// come out of a refresh unchanged.
func TestLagLeavesTheGroupListAlone(t *testing.T) {
	f := newLagFixture(t)
	f.commit(t, "a", map[int32]int64{0: 1})
	f.commit(t, "b", map[int32]int64{0: 1})
	groups := []string{"b", "a", "missing"}
	lag := NewLag(prometheus.NewRegistry(), f.adm, groups, []string{"t"}, quietLog())
	for i := 0; i < 3; i++ {
		if err := lag.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(groups) != "[b a missing]" {
		t.Fatalf("the group list was changed to %v", groups)
	}
}
