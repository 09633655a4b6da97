//go:build realkafka

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/cmd/podsvc/app"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRealClients shows that Kafka clients we did not write read our topics
// and agree with our numbers, on the embedded broker (kfake) and on the real
// 3-node cluster. The clients are Apache Kafka's own tools from the release
// deploy/local/kafka.sh fetched (so the test lives in the realkafka pass,
// where the release is at hand):
//
//   - the console consumer reads pod.order.events from the start: it gets
//     every record of the topic once, every key is an order this test
//     created, every record has event-type and order-version headers that
//     match its value, and every value is valid against schemas/events;
//   - kafka-consumer-groups --describe, once the service is idle, reports
//     for every group of the service the same partitions, and on each the
//     same lag, as our pod_consumer_lag.
func TestRealClients(t *testing.T) {
	brokers := realKafkaBrokers(t)
	quickLag := func(c *config.Config) { c.MetricsRefresh = 200 * time.Millisecond }

	t.Run("embedded broker", func(t *testing.T) {
		// podtest.Config puts every podsvc of the realkafka pass on the
		// cluster: no brokers (and no prefix) brings back the in-process one.
		d := startDemo(t, fastPushes, quickLag, func(c *config.Config) {
			c.KafkaBrokers, c.KafkaTopicPrefix, c.KafkaGroupPrefix = nil, "", ""
		})
		if len(d.app.Brokers) != 1 || slices.Contains(brokers, d.app.Brokers[0]) {
			t.Fatalf("podsvc should run on its embedded broker, but its brokers are %v", d.app.Brokers)
		}
		kafkasOwnClientsAgree(t, d)
	})

	t.Run("3-node cluster", func(t *testing.T) {
		prefix := "t" + testenv.RandomSuffix() + "."
		// Registered before podsvc starts, so it runs after podsvc stopped:
		// the shared cluster keeps nothing of this test (the console
		// consumer's group carries the prefix too).
		t.Cleanup(func() { podtest.DropPrefixed(t, brokers, prefix) })
		d := startDemo(t, fastPushes, quickLag, func(c *config.Config) {
			c.KafkaBrokers, c.KafkaTopicPrefix, c.KafkaGroupPrefix = brokers, prefix, prefix
		})
		kafkasOwnClientsAgree(t, d)
	})
}

func kafkasOwnClientsAgree(t *testing.T, d demoEnv) {
	start := time.Now()
	v := d.variant(t, "ACTIVE", "tshirt")
	var ids []uuid.UUID
	for i := range 3 {
		o := create(t, d.client, tshirtOrder(v.VariantID, fmt.Sprintf("realclients-%d", i), i+1))
		ids = append(ids, o.OrderID)
	}
	for _, id := range ids {
		d.waitStatus(t, d.client, id, "SUCCESS")
	}
	// Nothing more is coming for these orders: the decider, the pusher and
	// the projector applied everything, so the events topic is final.
	waitPushesSettled(t, d, ids...)
	statuses := map[string]string{} // order id → its status in the API
	for _, id := range ids {
		statuses[id.String()] = d.detail(t, d.client, id).Status
	}

	topic := d.topic(schemas.TopicOrderEvents)
	ends := partitionEnds(t, d, topic)
	var total int64
	for _, end := range ends {
		total += end
	}
	records := readWithConsoleConsumer(t, d, topic, total)
	checkConsumerReadEveryRecordOnce(t, topic, records, ends)
	checkEventsAreOurOrdersAndValid(t, records, statuses)
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("Kafka's console consumer read all %d records of %s (%d orders), every one valid and consistent",
		len(records), topic, len(ids))

	checkLagAgreesWithKafkaConsumerGroups(t, d)
	t.Logf("done in %s", time.Since(start).Round(100*time.Millisecond))
}

// --- the console consumer -----------------------------------------------------

// consoleRecord is one record as Kafka's console consumer printed it.
type consoleRecord struct {
	partition int32
	offset    int64
	headers   map[string]string
	key       string
	value     string
}

// The console consumer's separators: control characters, which neither a
// UUID key, nor a header of ours, nor a JSON value (which must escape
// them) can hold, so every line splits unambiguously.
const (
	fieldSep  = "\x1f" // between partition, offset, headers, key and value
	headerSep = "\x1e" // between headers (each is key:value)
)

// readWithConsoleConsumer reads n records of topic from the start with
// Kafka's ConsoleConsumer, in a group of its own (under the group prefix,
// committing nothing), and parses what it printed.
func readWithConsoleConsumer(t *testing.T, d demoEnv, topic string, n int64) []consoleRecord {
	t.Helper()
	if n == 0 {
		t.Fatalf("%s is empty: there is nothing for the console consumer to read", topic)
	}
	group := d.cfg.Naming().Group("realclients-console-" + testenv.RandomSuffix())
	out, err := runKafkaTool("org.apache.kafka.tools.consumer.ConsoleConsumer",
		"--bootstrap-server", strings.Join(d.app.Brokers, ","), "--topic", topic,
		"--from-beginning", "--max-messages", strconv.FormatInt(n, 10), "--timeout-ms", "20000",
		"--group", group, "--command-property", "enable.auto.commit=false",
		"--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true",
		"--formatter-property", "print.headers=true", "--formatter-property", "print.key=true",
		"--formatter-property", "key.separator="+fieldSep, "--formatter-property", "headers.separator="+headerSep)
	records, perr := parseConsoleOutput(out)
	if perr != nil {
		t.Fatalf("the console consumer's output does not parse: %v\n%s", perr, out)
	}
	if err != nil && int64(len(records)) < n {
		t.Fatalf("the console consumer read %d of the %d records of %s: %v", len(records), n, topic, err)
	}
	return records
}

// parseConsoleOutput parses lines of "Partition:P␟Offset:O␟headers␟key␟value",
// the headers being "k:v␞k:v" (or NO_HEADERS).
func parseConsoleOutput(out string) ([]consoleRecord, error) {
	var recs []consoleRecord
	for line := range strings.SplitSeq(out, "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, fieldSep)
		if len(f) != 5 {
			return nil, fmt.Errorf("line %q has %d fields, want partition, offset, headers, key and value", line, len(f))
		}
		p, err1 := strconv.ParseInt(strings.TrimPrefix(f[0], "Partition:"), 10, 32)
		o, err2 := strconv.ParseInt(strings.TrimPrefix(f[1], "Offset:"), 10, 64)
		if err := errors.Join(err1, err2); err != nil || !strings.HasPrefix(f[0], "Partition:") || !strings.HasPrefix(f[1], "Offset:") {
			return nil, fmt.Errorf("line %q does not start with Partition:P and Offset:O (%v)", line, err)
		}
		r := consoleRecord{partition: int32(p), offset: o, headers: map[string]string{}, key: f[3], value: f[4]}
		if f[2] != "NO_HEADERS" {
			for h := range strings.SplitSeq(f[2], headerSep) {
				k, v, ok := strings.Cut(h, ":")
				if !ok {
					return nil, fmt.Errorf("header %q of line %q is not key:value", h, line)
				}
				if _, dup := r.headers[k]; dup {
					return nil, fmt.Errorf("header %s twice in line %q", k, line)
				}
				r.headers[k] = v
			}
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// partitionEnds is the end offset of every partition of topic.
func partitionEnds(t *testing.T, d demoEnv, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.app.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		ends[o.Partition] = o.Offset
	})
	if len(ends) == 0 {
		t.Fatalf("%s has no partitions", topic)
	}
	return ends
}

// checkConsumerReadEveryRecordOnce: the console consumer read each offset
// of each partition exactly once (we publish without transactions, so every
// offset below the end is a record).
func checkConsumerReadEveryRecordOnce(t *testing.T, topic string, records []consoleRecord, ends map[int32]int64) {
	t.Helper()
	read := map[int32]map[int64]int{}
	for _, r := range records {
		if read[r.partition] == nil {
			read[r.partition] = map[int64]int{}
		}
		read[r.partition][r.offset]++
	}
	for p := range read {
		if _, ok := ends[p]; !ok {
			t.Errorf("the console consumer read partition %d of %s, which does not exist", p, topic)
		}
	}
	for p, end := range ends {
		var missing, twice []int64
		for o := range end {
			switch read[p][o] {
			case 0:
				missing = append(missing, o)
			case 1:
			default:
				twice = append(twice, o)
			}
		}
		if len(missing) > 0 || len(twice) > 0 || int64(len(read[p])) != end {
			t.Errorf("the console consumer read %d distinct offsets of %s/%d, which holds %d (missing %v, read more than once %v)",
				len(read[p]), topic, p, end, missing, twice)
		}
	}
}

// checkEventsAreOurOrdersAndValid checks every record against what we
// promise of pod.order.events: the key is an order id (of this test's
// orders), the event-type header is the value's "topic", the value is
// valid against its JSON Schema and names the keyed order, and
// order-version counts the order's events 1, 2, 3... (1 being
// order.created); a republished event (a decider batch redone after its
// produce and before its commit emits it again) repeats a version with the
// same event id. The
// last event of each order carries the status the API reports.
func checkEventsAreOurOrdersAndValid(t *testing.T, records []consoleRecord, statuses map[string]string) {
	t.Helper()
	type stream struct {
		version    int               // the last new version read
		eventIDs   map[int]uuid.UUID // by version
		lastStatus string
	}
	streams := map[string]*stream{}
	republished := 0
	for _, r := range records {
		where := fmt.Sprintf("record %d/%d (key %s)", r.partition, r.offset, r.key)
		if _, ours := statuses[r.key]; !ours {
			t.Errorf("%s: the key is not one of this test's orders %v", where, slices.Sorted(maps.Keys(statuses)))
			continue
		}
		typ, hasType := r.headers[schemas.HeaderEventType]
		versionHeader, hasVersion := r.headers[schemas.HeaderOrderVersion]
		version, err := strconv.Atoi(versionHeader)
		if !hasType || !hasVersion || err != nil || version < 1 {
			t.Errorf("%s: headers %v lack %s or a positive integer %s", where, r.headers, schemas.HeaderEventType, schemas.HeaderOrderVersion)
			continue
		}
		if err := schemas.ValidateEvent([]byte(r.value)); err != nil {
			t.Errorf("%s: the value is not valid against its event schema: %v\n%s", where, err, r.value)
			continue
		}
		ev, err := schemas.ParseEvent([]byte(r.value))
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		var data schemas.OrderEventData
		if err := ev.Decode(&data); err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if ev.Type != typ {
			t.Errorf("%s: header %s is %q but the value's topic is %q", where, schemas.HeaderEventType, typ, ev.Type)
		}
		if data.Order.ID.String() != r.key {
			t.Errorf("%s: the value is an event of order %s", where, data.Order.ID)
		}
		if (version == 1) != (typ == schemas.TypeOrderCreated) {
			t.Errorf("%s: %s has order-version %d (only order.created, and every order.created, has version 1)", where, typ, version)
		}
		s := streams[r.key]
		if s == nil {
			s = &stream{eventIDs: map[int]uuid.UUID{}}
			streams[r.key] = s
		}
		switch {
		case version == s.version+1:
			s.version, s.eventIDs[version] = version, ev.ID
			if data.Order.ClientStatus != nil {
				s.lastStatus = *data.Order.ClientStatus
			}
		case version <= s.version && s.eventIDs[version] == ev.ID:
			republished++
		default:
			t.Errorf("%s: %s %s has order-version %d after version %d (want %d, or a repeat of an earlier event with its id)",
				where, typ, ev.ID, version, s.version, s.version+1)
		}
	}
	for id, status := range statuses {
		s := streams[id]
		switch {
		case s == nil:
			t.Errorf("order %s: the console consumer read no event of it", id)
		case s.lastStatus != status:
			t.Errorf("order %s: its last event (version %d) says client_status %q, the API says %s", id, s.version, s.lastStatus, status)
		}
	}
	if republished > 0 {
		t.Logf("%d records were republished events (same id and version)", republished)
	}
}

// --- kafka-consumer-groups ------------------------------------------------------

// groupPartition is one row of kafka-consumer-groups --describe: a
// partition a group is assigned or has committed on. currentOffset and lag
// are "-" when the group has no committed offset there.
type groupPartition struct {
	group, topic               string
	partition                  int32
	currentOffset, endOffset   string
	lag                        string
	logicalGroup, logicalTopic string
}

func (r groupPartition) seriesKey() string {
	return fmt.Sprintf("group=%s,partition=%d,topic=%s", r.logicalGroup, r.partition, r.logicalTopic)
}

// checkLagAgreesWithKafkaConsumerGroups waits until every group of the
// service is idle (kadm reports no lag), then compares pod_consumer_lag
// with kafka-consumer-groups --describe of every group, row by row. Both
// sides must list the same (group, topic, partition) rows, with:
//
//   - a committed offset: pod_consumer_lag is Kafka's LAG, which is
//     LOG-END-OFFSET − CURRENT-OFFSET;
//   - no committed offset (Kafka prints "-" for CURRENT-OFFSET and LAG, on
//     a partition assigned to a member): pod_consumer_lag counts the whole
//     partition as not yet committed (kadm's rule: end − log start, the log
//     start being 0 on these fresh topics), so it must be LOG-END-OFFSET;
//     idle, that is 0: a group that read records commits them.
//
// The metric is refreshed in the background (every 200 ms here), so the
// comparison is retried until a deadline, and only counts when the metric
// did not change while Kafka's tool ran.
func checkLagAgreesWithKafkaConsumerGroups(t *testing.T, d demoEnv) {
	t.Helper()
	naming := d.cfg.Naming()
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.app.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	testenv.Eventually(t, 60*time.Second, func() error {
		lags := kadmLag(t, adm, naming)
		for k, v := range lags {
			if v != 0 {
				return fmt.Errorf("not idle yet: kadm reports lag %v for %s", v, k)
			}
		}
		return nil
	})

	var rows []groupPartition
	var output string
	var toolErr error
	err = testenv.Poll(60*time.Second, func() error {
		before := series(scrape(t, d.app.Addr()), "pod_consumer_lag")
		rows, output, toolErr = describeConsumerGroups(d, naming)
		if toolErr != nil {
			return nil // Kafka's tool failed: no use retrying
		}
		after := series(scrape(t, d.app.Addr()), "pod_consumer_lag")
		if !maps.Equal(before, after) {
			return errors.New("pod_consumer_lag changed while kafka-consumer-groups ran")
		}
		return lagDisagreements(rows, after)
	})
	if toolErr != nil {
		t.Fatalf("kafka-consumer-groups --describe could not describe the groups of the service: %v\n%s", toolErr, output)
	}
	if err != nil {
		t.Fatalf("pod_consumer_lag does not agree with kafka-consumer-groups --describe:\n%v\n\nkafka-consumer-groups printed:\n%s", err, output)
	}
	committed := 0
	for _, r := range rows {
		if r.lag != "-" {
			committed++
		}
	}
	t.Logf("pod_consumer_lag agrees with kafka-consumer-groups on all %d partitions of %d groups (%d with a committed offset, %d without, all empty)",
		len(rows), len(app.ConsumerGroups), committed, len(rows)-committed)
}

// lagDisagreements lists every row on which the exported pod_consumer_lag
// and Kafka's description differ, and every row only one of them has.
func lagDisagreements(rows []groupPartition, exported map[string]float64) error {
	var diffs []string
	described := map[string]bool{}
	groupsDescribed := map[string]bool{}
	for _, r := range rows {
		key := r.seriesKey()
		described[key] = true
		groupsDescribed[r.logicalGroup] = true
		got, ok := exported[key]
		kafkaSays := fmt.Sprintf("kafka-consumer-groups says offset %s of %s, lag %s", r.currentOffset, r.endOffset, r.lag)
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: %s, but pod_consumer_lag has no such series", key, kafkaSays))
		case r.lag == "-" && strconv.FormatFloat(got, 'f', -1, 64) != r.endOffset:
			diffs = append(diffs, fmt.Sprintf("%s: %s (nothing committed), but pod_consumer_lag is %v, not the %s records of the partition", key, kafkaSays, got, r.endOffset))
		case r.lag == "-" && r.endOffset != "0":
			diffs = append(diffs, fmt.Sprintf("%s: %s: an idle group has not committed a partition holding records", key, kafkaSays))
		case r.lag != "-" && strconv.FormatFloat(got, 'f', -1, 64) != r.lag:
			diffs = append(diffs, fmt.Sprintf("%s: %s, but pod_consumer_lag is %v", key, kafkaSays, got))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(exported)) {
		if !described[key] {
			diffs = append(diffs, fmt.Sprintf("%s: pod_consumer_lag is %v, but kafka-consumer-groups lists no such partition", key, exported[key]))
		}
	}
	for _, g := range app.ConsumerGroups {
		if !groupsDescribed[g] {
			diffs = append(diffs, fmt.Sprintf("kafka-consumer-groups describes no partition of group %s", g))
		}
	}
	if len(diffs) > 0 {
		return errors.New(strings.Join(diffs, "\n"))
	}
	return nil
}

// describeConsumerGroups runs kafka-consumer-groups --describe on every
// group of the service (under its group prefix) and parses its tables. It
// returns the raw output too, for failure messages.
func describeConsumerGroups(d demoEnv, naming schemas.Naming) ([]groupPartition, string, error) {
	args := []string{"--bootstrap-server", strings.Join(d.app.Brokers, ","), "--describe"}
	for _, g := range app.ConsumerGroups {
		args = append(args, "--group", naming.Group(g))
	}
	out, err := runKafkaTool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", args...)
	if err != nil {
		return nil, out, err
	}
	rows, err := parseGroupDescription(out, naming)
	return rows, out, err
}

// parseGroupDescription parses the tables kafka-consumer-groups --describe
// prints, one per group, each under a header line (GROUP TOPIC PARTITION
// CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID); columns are
// found by name. Notices between tables ("Consumer group 'g' has no active
// members.") are skipped.
func parseGroupDescription(out string, naming schemas.Naming) ([]groupPartition, error) {
	var rows []groupPartition
	var col map[string]int
	need := []string{"GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case f[0] == "GROUP":
			col = map[string]int{}
			for i, name := range f {
				col[name] = i
			}
			for _, name := range need {
				if _, ok := col[name]; !ok {
					return nil, fmt.Errorf("header %q lacks column %s", line, name)
				}
			}
			continue
		case col == nil || len(f) != len(col):
			continue // a notice
		}
		r := groupPartition{group: f[col["GROUP"]], topic: f[col["TOPIC"]], currentOffset: f[col["CURRENT-OFFSET"]],
			endOffset: f[col["LOG-END-OFFSET"]], lag: f[col["LAG"]]}
		p, err := strconv.ParseInt(f[col["PARTITION"]], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("line %q: partition: %v", line, err)
		}
		r.partition = int32(p)
		end, err := strconv.ParseInt(r.endOffset, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: log end offset: %v", line, err)
		}
		if (r.currentOffset == "-") != (r.lag == "-") {
			return nil, fmt.Errorf("line %q: a lag without a committed offset, or the reverse", line)
		}
		if r.lag != "-" {
			cur, err1 := strconv.ParseInt(r.currentOffset, 10, 64)
			lag, err2 := strconv.ParseInt(r.lag, 10, 64)
			if err1 != nil || err2 != nil || lag != end-cur {
				return nil, fmt.Errorf("line %q: LAG is not LOG-END-OFFSET − CURRENT-OFFSET", line)
			}
		}
		r.logicalGroup, r.logicalTopic = naming.LogicalGroup(r.group), naming.LogicalTopic(r.topic)
		rows = append(rows, r)
	}
	if col == nil {
		return nil, errors.New("no table (no GROUP header line)")
	}
	return rows, nil
}

// --- running Kafka's tools -------------------------------------------------------

// runKafkaTool runs one of Kafka's tool classes with the release's jars
// through `deploy/local/kafka.sh tool` and returns what it printed on
// stdout; an error carries its exit status and stderr.
func runKafkaTool(class string, args ...string) (string, error) {
	script, err := filepath.Abs(filepath.Join("..", "..", "deploy", "local", "kafka.sh"))
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script, "tool", class}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kafka.sh tool %s: %v\n%s", class[strings.LastIndex(class, ".")+1:], err, stderr.String())
	}
	return stdout.String(), nil
}
