//go:build realkafka

package e2e

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/printpod/pod/cmd/podsvc/app"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// realKafkaBrokers is the cluster the realkafka pass of `make test` runs
// on; the test fails without it (this file is built only with -tags
// realkafka, which make sets together with the brokers).
func realKafkaBrokers(t *testing.T) []string {
	t.Helper()
	brokers := podtest.RealKafka()
	if brokers == nil {
		t.Fatalf("%s is not set: run this test through `make test-realkafka`, which starts a 3-node Kafka "+
			"(deploy/local/kafka.sh start), sets %s from it and stops the cluster afterwards", podtest.RealKafkaEnv, podtest.RealKafkaEnv)
	}
	return brokers
}

// TestRealKafkaSharedCluster runs podsvc on a real 3-broker cluster with a
// topic and group prefix of its own, as an environment sharing the cluster
// would: an order goes all the way to SUCCESS, and every topic and group it
// made carries its prefix, with replication 3 and min.insync.replicas 2 and
// the configured retention.
func TestRealKafkaSharedCluster(t *testing.T) {
	brokers := realKafkaBrokers(t)
	prefix := "t" + testenv.RandomSuffix() + "."
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// kadm answers a listing of all topics from the client's cached
	// metadata when it is recent: the listing after the run is made with a
	// fresh client.
	newAdmin := func() *kadm.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("podtest-realkafka"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return kadm.NewClient(cl)
	}
	adm := newAdmin()
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("reach %v: %v", brokers, err)
	}
	if len(meta.Brokers) < 3 {
		t.Fatalf("the cluster at %v has %d brokers, this test needs 3", brokers, len(meta.Brokers))
	}
	before, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	beforeGroups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before podsvc starts, so it runs after podsvc stopped: the
	// shared cluster keeps nothing of this test.
	t.Cleanup(func() { podtest.DropPrefixed(t, brokers, prefix) })

	d := startDemo(t, fastPushes, func(c *config.Config) {
		c.KafkaBrokers = brokers
		c.KafkaTopicPrefix = prefix
		c.KafkaGroupPrefix = prefix
	})
	cfg := d.cfg
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	// An order all the way through: API, decider, projector, pusher.
	v := d.variant(t, "ACTIVE", "tshirt")
	r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "realkafka-1", 1))
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var o orderrm.Order
	r.JSON(t, &o)
	d.waitStatus(t, d.client, o.OrderID, "SUCCESS")

	// Every topic podsvc made carries the prefix, and is made as specified.
	adm = newAdmin()
	after, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var created []string
	for _, name := range after.Names() {
		if !before.Has(name) && !strings.HasPrefix(name, "__") {
			created = append(created, name)
		}
	}
	for _, name := range created {
		if !strings.HasPrefix(name, prefix) {
			t.Errorf("topic %s was created without the prefix %s", name, prefix)
		}
	}
	retention := map[string]time.Duration{}
	var want []string
	for _, set := range app.TopicSpecs(cfg) {
		for _, name := range set.Topics {
			want = append(want, name)
			retention[name] = set.Spec.Retention
		}
	}
	if len(want) < 20 {
		t.Fatalf("only %d topics specified: %v", len(want), want)
	}
	for _, name := range want {
		if !slices.Contains(created, name) {
			t.Errorf("topic %s was not created", name)
			continue
		}
		for p, pd := range after[name].Partitions {
			if len(pd.Replicas) != 3 {
				t.Errorf("%s/%d has %d replicas, want 3", name, p, len(pd.Replicas))
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	configs, err := adm.DescribeTopicConfigs(ctx, want...)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range configs {
		if rc.Err != nil {
			t.Errorf("configs of %s: %v", rc.Name, rc.Err)
			continue
		}
		got := map[string]string{}
		for _, c := range rc.Configs {
			if c.Value != nil {
				got[c.Key] = *c.Value
			}
		}
		if got["min.insync.replicas"] != "2" {
			t.Errorf("%s: min.insync.replicas = %q, want 2", rc.Name, got["min.insync.replicas"])
		}
		w := strconv.FormatInt(retention[rc.Name].Milliseconds(), 10)
		if retention[rc.Name] == kafka.Forever {
			w = "-1"
		}
		if retention[rc.Name] == 0 || got["retention.ms"] != w {
			t.Errorf("%s: retention.ms = %q, want %s", rc.Name, got["retention.ms"], w)
		}
	}
	if r := retention[cfg.Naming().Topic(schemas.TopicCatalogEvents)]; r != kafka.Forever {
		t.Errorf("the catalog's events are kept only %s; a replay of the catalog needs them all", r)
	}
	if r := retention[cfg.Naming().RetryTier(5)]; r <= 12*time.Hour {
		t.Errorf("the 12h retry tier is kept only %s", r)
	}

	// Every consumer group runs under the group prefix, and no other group
	// appeared.
	testenv.Eventually(t, 60*time.Second, func() error {
		groups, err := adm.ListGroups(ctx)
		if err != nil {
			return err
		}
		for _, g := range app.ConsumerGroups {
			if _, ok := groups[cfg.Naming().Group(g)]; !ok {
				return testenv.Errorf("group %s not on the cluster yet (have %v)", cfg.Naming().Group(g), groups.Groups())
			}
		}
		for _, g := range groups.Groups() {
			if _, old := beforeGroups[g]; !old && !strings.HasPrefix(g, prefix) {
				return testenv.Errorf("group %s appeared without the prefix %s", g, prefix)
			}
		}
		return nil
	})
}
