//go:build realkafka

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/app"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
)

// TestKafkasOwnToolsReadWhatWeWrite reads pod.order.events with Kafka's own
// console consumer and describes our consumer groups with Kafka's own
// kafka-consumer-groups (both from the release deploy/local/kafka.sh
// fetched), on the embedded broker and on the 3-node cluster: what an
// analytics team's client sees and what an operator's tool reports must be
// what we promise. It runs in the realkafka pass, where the release is at
// hand.
func TestKafkasOwnToolsReadWhatWeWrite(t *testing.T) {
	brokers := realKafkaBrokers(t)
	t.Run("embedded broker", func(t *testing.T) {
		d := startDemo(t, fastPushes)
		checkReadByKafkaTools(t, d)
	})
	t.Run("3-node cluster", func(t *testing.T) {
		prefix := "t" + testenv.RandomSuffix() + "."
		t.Cleanup(func() { podtest.DropPrefixed(t, brokers, prefix) })
		d := startDemo(t, fastPushes, func(c *config.Config) {
			c.KafkaBrokers, c.KafkaTopicPrefix, c.KafkaGroupPrefix = brokers, prefix, prefix
		})
		checkReadByKafkaTools(t, d)
	})
}

func checkReadByKafkaTools(t *testing.T, d demoEnv) {
	v := d.variant(t, "ACTIVE", "tshirt")
	ours := map[string]bool{}
	for i := range 3 {
		o := create(t, d.client, tshirtOrder(v.VariantID, fmt.Sprintf("tools-%d", i), i+1))
		ours[o.OrderID.String()] = true
		d.waitStatus(t, d.client, o.OrderID, "SUCCESS")
	}

	// Everything on the events topic, as Kafka's console consumer prints it.
	topic := d.cfg.Naming().Topic(schemas.TopicOrderEvents)
	records := consoleConsume(t, d, topic)
	last := map[string]int{} // order id → last order-version read
	types := map[string][]string{}
	for _, r := range records {
		if !ours[r.key] {
			t.Errorf("record key %q is not one of this test's order ids", r.key)
			continue
		}
		typ, version := r.headers[schemas.HeaderEventType], r.headers[schemas.HeaderOrderVersion]
		n, err := strconv.Atoi(version)
		if err != nil || n < 1 {
			t.Errorf("order %s: order-version header %q is not a positive integer", r.key, version)
		} else if n <= last[r.key] {
			t.Errorf("order %s: order-version %d read after %d", r.key, n, last[r.key])
		}
		last[r.key] = n
		if err := schemas.ValidateEvent([]byte(r.value)); err != nil {
			t.Errorf("order %s version %s: the value breaks its schema: %v", r.key, version, err)
		}
		var env struct {
			Topic string `json:"topic"`
			Data  struct {
				Order struct {
					ID string `json:"id"`
				} `json:"order"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(r.value), &env); err != nil {
			t.Errorf("order %s: value is not JSON: %v", r.key, err)
			continue
		}
		if env.Topic != typ {
			t.Errorf("order %s: event-type header %q, value's topic %q", r.key, typ, env.Topic)
		}
		if env.Data.Order.ID != r.key {
			t.Errorf("record key %s carries order %s", r.key, env.Data.Order.ID)
		}
		types[r.key] = append(types[r.key], typ)
	}
	for id := range ours {
		if len(types[id]) == 0 || types[id][0] != schemas.TypeOrderCreated || !slices.Contains(types[id], schemas.TypeOrderStatusUpdated) {
			t.Errorf("order %s: events read %v, want order.created first and a status update", id, types[id])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d records of %d orders read by Kafka's console consumer, every one valid", len(records), len(ours))

	// Idle, our exported lag is what Kafka's own tool reports, group by
	// group, partition by partition.
	naming := d.cfg.Naming()
	var compared, uncommitted int
	testenv.Eventually(t, 60*time.Second, func() error {
		compared, uncommitted = 0, 0
		described := describeGroups(t, d, naming)
		exported := series(scrape(t, d.app.Addr()), "pod_consumer_lag")
		for _, g := range app.ConsumerGroups {
			rows := 0
			for _, row := range described {
				if row.group != naming.Group(g) {
					continue
				}
				rows++
				key := fmt.Sprintf("group=%s,partition=%d,topic=%s", g, row.partition, naming.LogicalTopic(row.topic))
				got, ok := exported[key]
				switch {
				case row.lag == "-":
					// No commit on a partition: Kafka prints no lag; ours is
					// absent or 0, and only for a partition with nothing in it.
					if row.end != 0 || (ok && got != 0) {
						return fmt.Errorf("%s: no committed offset on a partition holding %d records; exported %v", key, row.end, got)
					}
				case !ok:
					return fmt.Errorf("%s: Kafka reports lag %s, nothing exported", key, row.lag)
				case strconv.FormatFloat(got, 'f', -1, 64) != row.lag:
					return fmt.Errorf("%s: exported %v, Kafka reports %s", key, got, row.lag)
				}
				if row.lag == "-" {
					uncommitted++
				} else {
					compared++
				}
			}
			if rows == 0 {
				return fmt.Errorf("Kafka describes no partition of group %s", naming.Group(g))
			}
		}
		return nil
	})
	t.Logf("kafka-consumer-groups and pod_consumer_lag agree on %d partitions of %d groups (%d more hold nothing and have no commit)",
		compared, len(app.ConsumerGroups), uncommitted)
}

// consumed is one record as the console consumer printed it.
type consumed struct {
	key, value string
	headers    map[string]string
}

// repoRoot is the repository's root, from this package's directory.
func repoRoot(t *testing.T) string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// kafkaTool runs one of Kafka's tool classes through deploy/local/kafka.sh.
func kafkaTool(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(repoRoot(t), "deploy", "local", "kafka.sh"), "tool"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kafka.sh tool %s: %v\n%s", args[0], err, stderr.String())
	}
	return stdout.String()
}

// consoleConsume reads topic from the start with Kafka's console consumer,
// every record as one line: headers, key and value separated by tabs.
func consoleConsume(t *testing.T, d demoEnv, topic string) []consumed {
	t.Helper()
	out := kafkaTool(t, "org.apache.kafka.tools.consumer.ConsoleConsumer",
		"--bootstrap-server", strings.Join(d.app.Brokers, ","), "--topic", topic, "--from-beginning",
		"--timeout-ms", "5000", "--group", "podtest-console-"+uuid.NewString(),
		"--formatter-property", "print.key=true", "--formatter-property", "print.headers=true",
		"--formatter-property", "key.separator=\t", "--formatter-property", "headers.separator=,", "--formatter-property", "headers.key.separator=:")
	var recs []consumed
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, "\t", 3)
		if len(parts) != 3 {
			t.Fatalf("console consumer line is not headers, key and value: %q", line)
		}
		r := consumed{key: parts[1], value: parts[2], headers: map[string]string{}}
		for _, h := range strings.Split(parts[0], ",") {
			if k, v, ok := strings.Cut(h, ":"); ok {
				r.headers[k] = v
			}
		}
		recs = append(recs, r)
	}
	if len(recs) == 0 {
		t.Fatalf("the console consumer read nothing from %s", topic)
	}
	return recs
}

// groupRow is one line of kafka-consumer-groups --describe.
type groupRow struct {
	group, topic string
	partition    int32
	end          int64
	lag          string // a number, or "-" without a committed offset
}

// describeGroups describes every consumer group of the service with
// Kafka's ConsumerGroupCommand (kafka-consumer-groups.sh --describe).
func describeGroups(t *testing.T, d demoEnv, naming schemas.Naming) []groupRow {
	t.Helper()
	args := []string{"org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
		"--bootstrap-server", strings.Join(d.app.Brokers, ","), "--describe"}
	for _, g := range app.ConsumerGroups {
		args = append(args, "--group", naming.Group(g))
	}
	var rows []groupRow
	for _, line := range strings.Split(kafkaTool(t, args...), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] == "GROUP" {
			continue
		}
		p, err1 := strconv.Atoi(f[2])
		end, err2 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil {
			continue // a "has no active members" notice, or a header
		}
		rows = append(rows, groupRow{group: f[0], topic: f[1], partition: int32(p), end: end, lag: f[5]})
	}
	return rows
}
