//go:build realkafka

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/internal/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaNode runs deploy/local/kafka.sh's command for one node of the
// local cluster (kill-node, start-node).
func kafkaNode(t *testing.T, command string, node int32) {
	t.Helper()
	out, err := exec.Command("bash", "../../deploy/local/kafka.sh", command, strconv.Itoa(int(node))).CombinedOutput()
	if err != nil {
		t.Fatalf("kafka.sh %s %d: %v\n%s", command, node, err, out)
	}
}

// TestALogCutBackByAnUncleanElectionIsReadOnFromTheCut cuts a log back on
// the real cluster as an unclean leader election does, and checks that
// the stage runner applies every record written to the cut log, however
// far it grew past the offset stored before the cut.
//
// The topic has two replicas, A (the leader) and B, on nodes that are not
// the third (C), and min.insync.replicas 1. B is killed; records written
// then are on A only and applied from there. A is killed in turn; B is
// started again (B and C keep the controllers' quorum) and elected
// uncleanly, with the shorter log. Records written then take the offsets
// of those lost, and go past them.
//
// Two consumers read the topic. One runs throughout: its client finds the
// cut when the partition's leader changes. The other is stopped before
// the cut and started after it, as a podsvc down meanwhile would be: only
// the leader epoch stored with its offset tells it (without it, it took
// the first 30 records of the cut log for records applied before).
//
// It stops two of the cluster's three nodes for a while, so it runs alone
// (not waitsMostly), and leaves every partition of the cluster back in
// sync.
func TestALogCutBackByAnUncleanElectionIsReadOnFromTheCut(t *testing.T) {
	brokers := realKafkaBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("podtest-unclean"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(meta.Brokers) != 3 {
		t.Fatalf("the cluster at %v has %d live brokers, this test needs 3", brokers, len(meta.Brokers))
	}
	ids := meta.Brokers.NodeIDs()
	slices.Sort(ids)
	a, b := ids[0], ids[1]
	topic := "t" + testenv.RandomSuffix() + ".cut"

	// Whatever happens, the cluster is whole again before the next test:
	// both nodes running, every partition back in its replicas' sync.
	t.Cleanup(func() {
		for _, n := range []int32{a, b} {
			kafkaNode(t, "start-node", n)
		}
		testenv.Eventually(t, 3*time.Minute, func() error { return inSync(brokers) })
		podtest.DropPrefixed(t, brokers, topic)
	})

	createTopic(t, ctx, cl, topic, []int32{a, b}, map[string]string{"min.insync.replicas": "1"})
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE applied (consumer text, value text, n int NOT NULL DEFAULT 1, PRIMARY KEY (consumer, value))`); err != nil {
		t.Fatal(err)
	}
	runner := &stream.Runner{Pool: pool, Brokers: brokers, Log: podtest.Logger(t, "info")}
	consumer := func(name string) stream.Consumer {
		return stream.Consumer{Name: name, Topics: []string{topic}, MaxBatch: 7,
			Handle: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
				for _, r := range recs {
					if _, err := tx.Exec(ctx, `INSERT INTO applied (consumer, value) VALUES ($1, $2)
						ON CONFLICT (consumer, value) DO UPDATE SET n = applied.n + 1`, name, string(r.Value)); err != nil {
						return nil, err
					}
				}
				return nil, nil
			}}
	}
	start := func(c stream.Consumer) (stop func()) {
		runCtx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = runner.Run(runCtx, c) }()
		return func() { cancel(); <-done }
	}
	live, restarted := consumer(topic+".live"), consumer(topic+".restarted")
	stopLive := start(live)
	defer stopLive()
	stopRestarted := start(restarted)

	produce := func(kind string, n int) {
		t.Helper()
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s-%03d", kind, i)}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", kind, err)
		}
	}
	applied := func(kind string, want int) func() error {
		return func() error {
			for _, c := range []stream.Consumer{live, restarted} {
				var n, twice int
				if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE n > 1) FROM applied
					WHERE consumer = $1 AND value LIKE $2 || '-%'`, c.Name, kind).Scan(&n, &twice); err != nil {
					return err
				}
				if twice > 0 {
					return fmt.Errorf("%s: %d %s records applied more than once", c.Name, twice, kind)
				}
				if n != want {
					return fmt.Errorf("%s: %d %s records applied, want %d", c.Name, n, kind, want)
				}
			}
			return nil
		}
	}
	storedOffsets := func() (next, epoch []int64) {
		t.Helper()
		for _, c := range []stream.Consumer{live, restarted} {
			var n, e int64
			if err := pool.QueryRow(ctx, `SELECT next_offset, coalesce(leader_epoch, -1) FROM consumer_offsets WHERE consumer = $1`,
				c.Name).Scan(&n, &e); err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			next, epoch = append(next, n), append(epoch, e)
		}
		return next, epoch
	}
	partition := func() (kadm.PartitionDetail, error) {
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return kadm.PartitionDetail{}, err
		}
		pd, ok := td[topic].Partitions[0]
		if !ok {
			return kadm.PartitionDetail{}, fmt.Errorf("no partition 0 of %s: %v", topic, td[topic].Err)
		}
		return pd, nil
	}

	produce("before", 20)
	testenv.Eventually(t, time.Minute, applied("before", 20))

	// B dies: once the controller has taken it out of the ISR, A alone
	// takes writes.
	kafkaNode(t, "kill-node", b)
	testenv.Eventually(t, time.Minute, func() error {
		pd, err := partition()
		if err != nil {
			return err
		}
		if !slices.Equal(pd.ISR, []int32{a}) || pd.Leader != a {
			return fmt.Errorf("leader %d, ISR %v; want %d alone", pd.Leader, pd.ISR, a)
		}
		return nil
	})
	produce("lost", 30)
	testenv.Eventually(t, time.Minute, applied("lost", 30))
	stopRestarted()
	if next, epochs := storedOffsets(); !slices.Equal(next, []int64{50, 50}) || slices.Min(epochs) < 0 {
		t.Fatalf("stored offsets %v with leader epochs %v; want 50 with an epoch for each consumer", next, epochs)
	}

	// A dies too, with the only copy of the last 30 records. B comes back
	// (with C, a quorum of controllers again) and is elected though it is
	// not in sync: its log ends at 20.
	kafkaNode(t, "kill-node", a)
	kafkaNode(t, "start-node", b)
	testenv.Eventually(t, 2*time.Minute, func() error {
		pd, err := partition()
		if err != nil {
			return err
		}
		if pd.Leader == b {
			return nil
		}
		res, err := adm.ElectLeaders(ctx, kadm.ElectLiveReplica, kadm.TopicsSet{topic: {0: {}}})
		if err != nil {
			return err
		}
		if r := res[topic][0]; r.Err != nil && !errors.Is(r.Err, kerr.ElectionNotNeeded) {
			return fmt.Errorf("unclean election: %v %s (leader %d, ISR %v)", r.Err, r.ErrMessage, pd.Leader, pd.ISR)
		}
		return fmt.Errorf("leader %d, ISR %v; want %d", pd.Leader, pd.ISR, b)
	})
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if end, _ := ends.Lookup(topic, 0); end.Offset != 20 {
		t.Fatalf("the new leader's log ends at %d, want 20 (the records before B died)", end.Offset)
	}

	// Past the offset stored for the lost records, so a runner that took
	// the stored offset as read would skip the first 30 of these.
	produce("after", 60)
	stopRestarted = start(restarted)
	defer stopRestarted()
	testenv.Eventually(t, 2*time.Minute, applied("after", 60))
	if next, _ := storedOffsets(); !slices.Equal(next, []int64{80, 80}) {
		t.Fatalf("stored offsets %v after the cut log was read, want 80 for each consumer", next)
	}
	if err := applied("before", 20)(); err != nil {
		t.Fatal(err)
	}
}

// createTopic makes a one-partition topic on the given replicas (the
// first leads), with configs.
func createTopic(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, replicas []int32, configs map[string]string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions, rt.ReplicationFactor = -1, -1
	ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	ra.Partition, ra.Replicas = 0, replicas
	rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	for k, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// inSync is nil once every partition of the cluster at brokers has a
// leader and all its replicas in its ISR. It asks with a fresh client, so
// no cached metadata answers.
func inSync(brokers []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("podtest-insync"))
	if err != nil {
		return err
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopicsWithInternal(ctx)
	if err != nil {
		return err
	}
	for _, d := range td.Sorted() {
		for _, p := range d.Partitions.Sorted() {
			if p.Leader < 0 || len(p.ISR) != len(p.Replicas) {
				return fmt.Errorf("%s/%d: leader %d, replicas %v, ISR %v", d.Topic, p.Partition, p.Leader, p.Replicas, p.ISR)
			}
		}
	}
	return nil
}
