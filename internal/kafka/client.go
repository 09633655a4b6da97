package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/printpod/pod/internal/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrNoBroker means no broker address is configured and no embedded broker's
// address file exists.
var ErrNoBroker = errors.New("no Kafka broker: set KAFKA_BROKERS, or start podsvc (embedded broker) with the same POD_DATA_DIR")

// ResolveBrokers returns brokers when set, else the address a running podsvc's
// embedded broker wrote to addrFile.
func ResolveBrokers(brokers []string, addrFile string) ([]string, error) {
	if len(brokers) > 0 {
		return brokers, nil
	}
	b, err := os.ReadFile(addrFile)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("%w (no %s)", ErrNoBroker, addrFile)
		}
		return nil, fmt.Errorf("read broker address: %w", err)
	}
	addr := strings.TrimSpace(string(b))
	if addr == "" {
		return nil, fmt.Errorf("%w (%s is empty)", ErrNoBroker, addrFile)
	}
	return []string{addr}, nil
}

// NewProducer returns a client for producing with idempotent (franz-go's
// default, never disabled here), fully acknowledged (acks=all) writes.
// ProduceSync sends its records at once (franz-go drains their partitions
// without lingering), so a caller that waits on the result pays no linger
// delay; an asynchronous Produce lingers up to franz-go's default (10 ms)
// for company in its request.
//
// A topic deleted and made again fails the records sent to it with
// UNKNOWN_TOPIC_ID (franz-go keeps the id it first saw); the producer then
// forgets the topic (remade), and the next record to it finds the new one.
func NewProducer(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	hook := &remade{}
	base := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.WithHooks(hook),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	hook.cl.Store(cl)
	return cl, nil
}

// remade purges from its producer a topic whose records failed with
// UNKNOWN_TOPIC_ID, once at a time per topic. The purge runs off the
// producer's own goroutine, which calls the hook.
type remade struct {
	cl      atomic.Pointer[kgo.Client]
	purging sync.Map // topic: a purge under way
}

func (h *remade) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if !errors.Is(err, kerr.UnknownTopicID) {
		return
	}
	if _, busy := h.purging.LoadOrStore(r.Topic, true); busy {
		return
	}
	go func() {
		defer h.purging.Delete(r.Topic)
		if cl := h.cl.Load(); cl != nil {
			cl.PurgeTopicsFromProducing(r.Topic)
		}
	}()
}

// TopicSpec is how EnsureTopics creates topics.
type TopicSpec struct {
	Partitions int
	// Replication is the replica count; 0 means min(3, the cluster's broker
	// count). min.insync.replicas is set to one less (at least 1), so with
	// acks=all a write survives the loss of any one replica and the topic
	// stays writable with one replica down.
	Replication int
	// Retention is retention.ms; 0 leaves the broker's default (the
	// embedded broker then keeps everything), Forever keeps every record.
	Retention time.Duration
}

// Forever is the Retention of a topic whose records are never deleted
// (retention.ms -1).
const Forever time.Duration = -1

// Replication resolves want (0 = min(3, brokers)) against the cluster.
func Replication(ctx context.Context, adm *kadm.Client, want int) (int, error) {
	if want > 0 {
		return want, nil
	}
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, fmt.Errorf("count brokers: %w", err)
	}
	return max(1, min(3, len(meta.Brokers))), nil
}

// MinInsyncReplicas is the min.insync.replicas of a topic with replication
// replicas: one less, at least 1.
func MinInsyncReplicas(replication int) int { return max(1, replication-1) }

// EnsureTopics creates every topic that does not exist yet as spec says.
// Existing topics are left as they are.
func EnsureTopics(ctx context.Context, cl *kgo.Client, spec TopicSpec, topics ...string) error {
	adm := kadm.NewClient(cl)
	rf, err := Replication(ctx, adm, spec.Replication)
	if err != nil {
		return err
	}
	configs := map[string]*string{"min.insync.replicas": kadm.StringPtr(strconv.Itoa(MinInsyncReplicas(rf)))}
	switch {
	case spec.Retention == Forever:
		configs["retention.ms"] = kadm.StringPtr("-1")
	case spec.Retention > 0:
		configs["retention.ms"] = kadm.StringPtr(strconv.FormatInt(spec.Retention.Milliseconds(), 10))
	}
	resp, err := adm.CreateTopics(ctx, int32(spec.Partitions), int16(rf), configs, topics...)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for _, t := range resp.Sorted() {
		if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t.Topic, t.Err)
		}
	}
	return waitKnown(ctx, cl, topics)
}

// knownPoll is how often waitKnown asks the brokers again.
const knownPoll = 100 * time.Millisecond

// waitKnown returns once every broker's metadata has each of topics with
// a leader for every partition. A broker learns of a topic a moment after
// the controller created it, and a record sent to one that has not yet
// fails with UNKNOWN_TOPIC_OR_PARTITION once the client has asked a few
// times: on a busy cluster, a service that produced right after creating
// its topics (the demo catalog, at start) failed to start.
func waitKnown(ctx context.Context, cl *kgo.Client, topics []string) error {
	var missing string
	err := wait.Until[struct{}](ctx, nil, knownPoll, true, func(ctx context.Context) (bool, error) {
		brokers, err := kadm.NewClient(cl).BrokerMetadata(ctx)
		if err != nil {
			return false, err
		}
		for _, b := range brokers.Brokers {
			t, err := unknownTo(ctx, cl.Broker(int(b.NodeID)), topics)
			if err != nil {
				return false, err
			}
			if t != "" {
				missing = fmt.Sprintf("%s (broker %d)", t, b.NodeID)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && missing != "" {
		return fmt.Errorf("topic %s not known to every broker: %w", missing, err)
	}
	return err
}

// unknownTo returns the first of topics broker does not know yet, with
// all its partitions led, or "".
func unknownTo(ctx context.Context, broker *kgo.Broker, topics []string) (string, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, broker)
	if err != nil {
		return "", err
	}
	known := make(map[string]bool, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 || len(t.Partitions) == 0 {
			continue
		}
		led := true
		for _, p := range t.Partitions {
			led = led && p.ErrorCode == 0 && p.Leader >= 0
		}
		known[*t.Topic] = led
	}
	for _, t := range topics {
		if !known[t] {
			return t, nil
		}
	}
	return "", nil
}

// LastOffsets reads the end offsets of topic: last is the offset of the
// last record of each partition that holds any (what a consumer must have
// applied to have caught up with the topic as it is now), records how many
// records the partitions took in all.
func LastOffsets(ctx context.Context, adm *kadm.Client, topic string) (last map[int32]int64, records int64, err error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read the log end of %s: %w", topic, err)
	}
	last = map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			last[o.Partition] = o.Offset - 1
			records += o.Offset
		}
	})
	return last, records, nil
}

// DropPrefixed deletes the topics and consumer groups whose names start
// with prefix: what one environment sharing a cluster (a test, a benchmark
// run) leaves behind. It returns how many of each it deleted.
func DropPrefixed(ctx context.Context, brokers []string, prefix string) (topics, groups int, err error) {
	if prefix == "" {
		return 0, 0, errors.New("drop prefixed: an empty prefix would name everything")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("pod-cleanup"))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var errs []error
	// drop deletes the listed names with prefix; it returns how many.
	drop := func(what string, names []string, listErr error, del func(...string) error) int {
		if listErr != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", what, listErr))
			return 0
		}
		names = slices.DeleteFunc(names, func(n string) bool { return !strings.HasPrefix(n, prefix) })
		if len(names) == 0 {
			return 0
		}
		if err := del(names...); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", what, err))
		}
		return len(names)
	}
	listedTopics, err := adm.ListTopics(ctx)
	topics = drop("topics", listedTopics.Names(), err, func(names ...string) error {
		resp, err := adm.DeleteTopics(ctx, names...)
		if err == nil {
			err = resp.Error()
		}
		return err
	})
	listedGroups, err := adm.ListGroups(ctx)
	groups = drop("groups", listedGroups.Groups(), err, func(names ...string) error {
		resp, err := adm.DeleteGroups(ctx, names...)
		if err == nil {
			err = resp.Error()
		}
		return err
	})
	return topics, groups, errors.Join(errs...)
}
