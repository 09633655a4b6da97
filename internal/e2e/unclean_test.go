//go:build realkafka

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/delivery"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaNode runs deploy/local/kafka.sh's command for one node of the
// local cluster (kill-node, start-node).
func kafkaNode(t *testing.T, command string, node int32) {
	t.Helper()
	if err := kafkaNodeErr(command, node); err != nil {
		t.Fatal(err)
	}
}

func kafkaNodeErr(command string, node int32) error {
	out, err := exec.Command("bash", "../../deploy/local/kafka.sh", command, strconv.Itoa(int(node))).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kafka.sh %s %d: %v\n%s", command, node, err, out)
	}
	return nil
}

// TestALogCutBackByAnUncleanElectionIsReadOnFromTheCut cuts a log back on
// the real cluster as an unclean leader election does (uncleanCut), and
// checks that the stage runner applies every record written to the cut
// log, however far it grew past the offset stored before the cut.
//
// Two consumers read the topic. One runs throughout: its client finds the
// cut when the partition's leader changes. The other is stopped before
// the cut and started after it, as a podsvc down meanwhile would be: only
// the leader epoch stored with its offset tells it (without it, it took
// the first 30 records of the cut log for records applied before).
func TestALogCutBackByAnUncleanElectionIsReadOnFromTheCut(t *testing.T) {
	brokers := realKafkaBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	topic := "t" + testenv.RandomSuffix() + ".cut"
	u := newUncleanCut(t, ctx, brokers, topic)
	cl := u.cl
	u.createTopic(t, 1)
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
		var once sync.Once
		return func() { once.Do(func() { cancel(); <-done }) }
	}
	live, restarted := consumer(topic+".live"), consumer(topic+".restarted")
	stopLive := start(live)
	defer stopLive()
	stopRestarted := start(restarted)
	defer func() { stopRestarted() }() // the second run's, or this one's if the test ends first

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
	produce("before", 20)
	testenv.Eventually(t, time.Minute, applied("before", 20))

	// B dies: once the controller has taken it out of the ISR, A alone
	// takes writes.
	u.killFollower(t)
	produce("lost", 30)
	testenv.Eventually(t, time.Minute, applied("lost", 30))
	stopRestarted()
	if next, epochs := storedOffsets(); !slices.Equal(next, []int64{50, 50}) || slices.Min(epochs) < 0 {
		t.Fatalf("stored offsets %v with leader epochs %v; want 50 with an epoch for each consumer", next, epochs)
	}

	// A dies too, with the only copy of the last 30 records. B comes back
	// (with C, a quorum of controllers again) and is elected though it is
	// not in sync: its log ends at 20.
	u.cut(t)
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
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
	testenv.Eventually(t, 2*time.Minute, applied("after", 60))
	if next, _ := storedOffsets(); !slices.Equal(next, []int64{80, 80}) {
		t.Fatalf("stored offsets %v after the cut log was read, want 80 for each consumer", next)
	}
	if err := applied("before", 20)(); err != nil {
		t.Fatal(err)
	}
}

// TestTheWebhookSenderDeliversWhatACutLogTookNew cuts back the webhook
// deliveries topic under a running podsvc (uncleanCut). The sender had
// taken the tasks of the lost records; the tasks written to the cut log
// after the election take their offsets. Each of those is delivered once.
//
// The sender's group is placed on the node never stopped, so its session
// mostly lives through the cut: it ends at the client's report of the cut
// and the next takes the log from there (cutBelowTaken; with that taken
// out, the new tasks were dropped as taken and the test failed). When the
// cluster's quorum loss ends the session all the same (once in five runs
// here), the new session starts from the committed offsets, whose epochs
// the client checks on its own: the test then checks that path.
func TestTheWebhookSenderDeliversWhatACutLogTookNew(t *testing.T) {
	brokers := realKafkaBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rc := newReceiver(t)
	var u *uncleanCut
	d := startDemo(t, allow(rc), fastPushes, func(c *config.Config) {
		// Made before podsvc starts, which keeps a topic it finds.
		u = newUncleanCut(t, ctx, brokers, c.Naming().Topic(schemas.TopicWebhookDeliveries))
		// The sender's group is coordinated by the node never stopped, so
		// the sender's session lives through the cut: a new session would
		// start from the committed offsets, whose epochs the client checks
		// on its own.
		c.KafkaGroupPrefix = u.groupPrefixKept(t, c.KafkaTopicPrefix, delivery.SenderGroup)
		u.createTopic(t, c.KafkaPartitions)
	})
	w := createWebhook(t, d.client, rc.url("/hooks"), "order.created")
	rc.setSecret(w.Secret)
	v := d.variant(t, "ACTIVE", "tshirt")

	// orders creates n orders; delivered waits until each one's
	// order.created has reached the receiver, and fails on any event
	// received twice.
	orders := func(kind string, n int) []uuid.UUID {
		ids := make([]uuid.UUID, n)
		for i := range ids {
			ids[i] = create(t, d.client, tshirtOrder(v.VariantID, fmt.Sprintf("%s-%d", kind, i), 1)).OrderID
		}
		return ids
	}
	delivered := func(ids []uuid.UUID) {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, func() error {
			seen := map[string]int{}
			byOrder := map[uuid.UUID]bool{}
			for _, g := range rc.requests() {
				seen[g.ID]++
				var env struct {
					Data struct {
						Order struct {
							ID uuid.UUID `json:"id"`
						} `json:"order"`
					} `json:"data"`
				}
				if err := json.Unmarshal(g.Body, &env); err != nil {
					return err
				}
				byOrder[env.Data.Order.ID] = true
			}
			for id, n := range seen {
				if n > 1 {
					t.Fatalf("event %s was delivered %d times", id, n)
				}
			}
			for _, id := range ids {
				if !byOrder[id] {
					return fmt.Errorf("order %s's order.created not delivered yet", id)
				}
			}
			return nil
		})
	}
	end := func() int64 {
		t.Helper()
		ends, err := u.adm.ListEndOffsets(ctx, u.topic)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
		return sum
	}

	delivered(orders("before", 5))
	u.killFollower(t)
	delivered(orders("lost", 10))
	taken := end()

	u.cut(t)
	if left := end(); left >= taken {
		t.Fatalf("the deliveries topic's logs end at %d after the election, %d before: nothing was cut", left, taken)
	}
	// The order topics lost B for a while too: their writes wait for it
	// to be back in their ISR (min.insync.replicas 2).
	testenv.Eventually(t, 2*time.Minute, func() error {
		td, err := u.adm.ListTopics(ctx)
		if err != nil {
			return err
		}
		for _, topic := range td.Sorted() {
			if !strings.HasPrefix(topic.Topic, d.cfg.KafkaTopicPrefix) || topic.Topic == u.topic {
				continue
			}
			for _, p := range topic.Partitions.Sorted() {
				if len(p.ISR) < 2 {
					return fmt.Errorf("%s/%d: ISR %v", topic.Topic, p.Partition, p.ISR)
				}
			}
		}
		return nil
	})
	delivered(orders("after", 10))
}

// uncleanCut cuts back the log of a topic on the local cluster as an
// unclean leader election does. The topic's partitions have two replicas,
// A (the leader) and B, on the nodes with the two lowest ids, and
// min.insync.replicas 1. killFollower kills B, so records written then
// are on A only; cut kills A, starts B again (B and the third node keep
// the controllers' quorum) and elects it uncleanly, with the shorter log.
// Records written then take the offsets of those lost.
//
// It stops two of the cluster's three nodes for a while, so a test using
// it runs alone (not waitsMostly). Its cleanup leaves both nodes running
// and every partition of the cluster back in sync.
type uncleanCut struct {
	ctx     context.Context
	cl      *kgo.Client
	adm     *kadm.Client
	topic   string
	parts   int32 // the topic's partitions (createTopic)
	a, b, c int32
}

// newUncleanCut prepares the cut of topic on the cluster at brokers. The
// node never stopped (C) is the one with the highest id.
func newUncleanCut(t *testing.T, ctx context.Context, brokers []string, topic string) *uncleanCut {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("podtest-unclean"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
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
	u := &uncleanCut{ctx: ctx, cl: cl, adm: adm, topic: topic, a: ids[0], b: ids[1], c: ids[2]}
	// Whatever happens, the cluster is whole again before the next test:
	// every step is tried, whichever failed before it.
	t.Cleanup(func() {
		for _, n := range []int32{u.a, u.b} {
			if err := kafkaNodeErr("start-node", n); err != nil {
				t.Errorf("the cluster is not whole again: %v", err)
			}
		}
		if err := testenv.Poll(3*time.Minute, func() error { return inSync(brokers) }); err != nil {
			t.Errorf("the cluster is not back in sync: %v", err)
		}
		podtest.DropPrefixed(t, brokers, topic)
	})
	return u
}

// createTopic makes the topic with partitions partitions, each on A and B.
func (u *uncleanCut) createTopic(t *testing.T, partitions int) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = u.topic
	rt.NumPartitions, rt.ReplicationFactor = -1, -1
	u.parts = int32(partitions)
	for p := range u.parts {
		ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		ra.Partition, ra.Replicas = p, []int32{u.a, u.b}
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	}
	c := kmsg.NewCreateTopicsRequestTopicConfig()
	c.Name, c.Value = "min.insync.replicas", kmsg.StringPtr("1")
	rt.Configs = append(rt.Configs, c)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(u.ctx, u.cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("create %s: %v", u.topic, err)
	}
}

// waitLeaders waits until every partition of the topic is led by leader
// with isr in sync, calling nudge (if any) while one is not.
func (u *uncleanCut) waitLeaders(t *testing.T, leader int32, isr []int32, nudge func() error) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, func() error {
		td, err := u.adm.ListTopics(u.ctx, u.topic)
		if err != nil {
			return err
		}
		for _, pd := range td[u.topic].Partitions.Sorted() {
			if pd.Leader != leader || (isr != nil && !slices.Equal(pd.ISR, isr)) {
				if nudge != nil {
					if err := nudge(); err != nil {
						return err
					}
				}
				return fmt.Errorf("partition %d: leader %d, ISR %v; want %d, %v", pd.Partition, pd.Leader, pd.ISR, leader, isr)
			}
		}
		if len(td[u.topic].Partitions) == 0 {
			return fmt.Errorf("no partitions of %s: %v", u.topic, td[u.topic].Err)
		}
		return nil
	})
}

// killFollower kills B and waits until A alone is in sync.
func (u *uncleanCut) killFollower(t *testing.T) {
	t.Helper()
	kafkaNode(t, "kill-node", u.b)
	u.waitLeaders(t, u.a, []int32{u.a}, nil)
}

// cut kills A, starts B and elects it, though not in sync.
func (u *uncleanCut) cut(t *testing.T) {
	t.Helper()
	kafkaNode(t, "kill-node", u.a)
	kafkaNode(t, "start-node", u.b)
	u.waitLeaders(t, u.b, nil, func() error {
		all := kadm.TopicsSet{}
		for p := range u.parts {
			all.Add(u.topic, p)
		}
		res, err := u.adm.ElectLeaders(u.ctx, kadm.ElectLiveReplica, all)
		if err != nil {
			return err
		}
		for _, r := range res[u.topic] {
			if r.Err != nil && !errors.Is(r.Err, kerr.ElectionNotNeeded) {
				return fmt.Errorf("unclean election of partition %d: %v %s", r.Partition, r.Err, r.ErrMessage)
			}
		}
		return nil
	})
}

// groupPrefixKept returns a group prefix, starting with prefix, under
// which group is coordinated by C, the node never stopped: the leader of
// the __consumer_offsets partition that keeps the group's offsets is C,
// and C is its preferred leader (the cluster's leader balancing would move
// it back there otherwise).
func (u *uncleanCut) groupPrefixKept(t *testing.T, prefix, group string) string {
	t.Helper()
	td, err := u.adm.ListTopicsWithInternal(u.ctx, "__consumer_offsets")
	if err != nil {
		t.Fatal(err)
	}
	offsets := td["__consumer_offsets"].Partitions
	if len(offsets) == 0 {
		t.Fatalf("no __consumer_offsets partitions: %v", td["__consumer_offsets"].Err)
	}
	for i := range 1000 {
		p := fmt.Sprintf("%sg%d.", prefix, i)
		// Kafka's placement of a group: the Java hash of its id.
		var h int32
		for _, r := range p + group {
			h = 31*h + r
		}
		pd := offsets[(h&0x7fffffff)%int32(len(offsets))]
		if pd.Leader == u.c && len(pd.Replicas) > 0 && pd.Replicas[0] == u.c {
			return p
		}
	}
	t.Fatalf("no group prefix puts %s on node %d", group, u.c)
	return ""
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
