package kafka

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/printpod/pod/internal/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestEnsureTopicsReturnsOnceEveryBrokerKnowsTheTopics plays a broker that
// learns of a topic a while after the controller created it: its first
// metadata answers naming the topic say UNKNOWN_TOPIC_OR_PARTITION, as a
// busy real cluster's did when a service produced right after creating
// its topics.
func TestEnsureTopicsReturnsOnceEveryBrokerKnowsTheTopics(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	addrs := cluster.ListenAddrs() // not from a control function: it would wait on itself

	const topic, lagging, behind = "pod.test.fresh", int32(2), 5
	var mu sync.Mutex
	unknown := 0 // the lagging broker's answers that did not know the topic
	cluster.ControlKey(int16(kmsg.Metadata), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := r.(*kmsg.MetadataRequest)
		if cluster.CurrentNode() != lagging || !slices.ContainsFunc(req.Topics, func(rt kmsg.MetadataRequestTopic) bool {
			return rt.Topic != nil && *rt.Topic == topic
		}) {
			return nil, nil, false
		}
		mu.Lock()
		defer mu.Unlock()
		if unknown == behind {
			return nil, nil, false
		}
		unknown++
		return notKnown(t, addrs, req), nil, true
	})

	cl, err := NewProducer(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := EnsureTopics(ctx, cl, TopicSpec{Partitions: 3}, topic); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if unknown < behind {
		t.Fatalf("EnsureTopics returned after broker %d had answered %d times, of %d, that it does not know %s yet",
			lagging, unknown, behind, topic)
	}
}

// notKnown is a metadata answer of a broker that knows every broker of
// the cluster at addrs and none of the requested topics.
func notKnown(t *testing.T, addrs []string, req *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	for i, addr := range addrs {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Error(err)
		}
		p, _ := strconv.Atoi(port)
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = int32(i), host, int32(p)
		resp.Brokers = append(resp.Brokers, b)
	}
	for _, rt := range req.Topics {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.ErrorCode = rt.Topic, kerr.UnknownTopicOrPartition.Code
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

// TestAProducerTakesATopicMadeAgain: a topic deleted and made again
// under a running producer fails the records sent to it while the
// producer still holds the old topic's id; the producer then forgets the
// topic, and a record sent after that goes to the new one. Without it
// every record failed until the process restarted.
func TestAProducerTakesATopicMadeAgain(t *testing.T) {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cl, err := NewProducer(cluster.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const topic = "pod.test.remade"
	if err := EnsureTopics(ctx, cl, TopicSpec{Partitions: 1}, topic); err != nil {
		t.Fatal(err)
	}
	send := func() error {
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr()
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	deleted, err := kadm.NewClient(cl).DeleteTopics(ctx, topic)
	if err == nil {
		err = deleted.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureTopics(ctx, cl, TopicSpec{Partitions: 1}, topic); err != nil {
		t.Fatal(err)
	}
	failed := 0
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := send(); err != nil {
			failed++
			return fmt.Errorf("%d sends to the topic made again failed, the last: %w", failed, err)
		}
		return nil
	})
}
