package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
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

// NewProducer returns a client for producing with idempotent, fully
// acknowledged writes. Records are not lingered: callers that wait on the
// produce result (HTTP handlers) must not pay a linger delay.
func NewProducer(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	return cl, nil
}

// EnsureTopics creates every topic that does not exist yet with the given
// partition count. Existing topics are left as they are.
func EnsureTopics(ctx context.Context, cl *kgo.Client, partitions int, topics ...string) error {
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopics(ctx, int32(partitions), -1, nil, topics...)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for _, t := range resp.Sorted() {
		if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t.Topic, t.Err)
		}
	}
	return nil
}
