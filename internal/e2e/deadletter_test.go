package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/delivery"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/internal/testenv"
	deliveryrm "github.com/printpod/pod/projections/delivery"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// poison is a record planted on a consumed topic past the API.
type poison struct {
	topic     string
	key       string
	value     []byte
	consumers []string // the stage consumers that read topic
	partition int32    // set once produced
	offset    int64
}

// createCommand reads the first command of kind "create" on topic as a
// JSON object.
func createCommand(t *testing.T, d demoEnv, topic string) map[string]any {
	t.Helper()
	var out map[string]any
	err := scanTopic(t, d.app.Brokers, d.topic(topic), 20*time.Second, func(r *kgo.Record) bool {
		var c map[string]any
		if err := json.Unmarshal(r.Value, &c); err != nil {
			t.Fatalf("record of %s: %v", topic, err)
		}
		if c["kind"] == "create" {
			out = c
			return true
		}
		return false
	})
	if err != nil {
		t.Fatalf("no create command on %s: %v", topic, err)
	}
	return out
}

// deadLetters reads pod.dlq.<consumer> until it holds want records.
func deadLetters(t *testing.T, d demoEnv, consumer string, want int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	err := scanTopic(t, d.app.Brokers, d.app.Naming.DeadLetterTopic(consumer), 60*time.Second, func(r *kgo.Record) bool {
		out = append(out, r)
		return len(out) >= want
	})
	if err != nil {
		t.Fatalf("%s: %d of %d dead letters: %v", consumer, len(out), want, err)
	}
	return out
}

func deadLetterCounts(t *testing.T, d demoEnv) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k, v := range series(scrape(t, d.app.Addr()), "pod_consumer_dead_letters_total") {
		out[strings.TrimPrefix(k, "consumer=")] = v
	}
	return out
}

// TestPoisonRecordsAreDeadLettered plants, straight on every topic a stage
// consumes, a record that is not JSON at all, and on the command topics a
// well-formed command with a NUL where Postgres refuses it (the incidents:
// SQLSTATE 22P05 in the order decider, a NUL in a webhook description). Each
// stage dead-letters them and goes on: orders and webhooks created through
// the API afterwards work, every stage's stored offset passes the poison,
// the dead letters carry the error and origin, the metric counts them, and
// podctl dlq list/replay shows and re-drives them, each at most once.
func TestPoisonRecordsAreDeadLettered(t *testing.T) {
	bin := buildPodctl(t)
	rc := newReceiver(t)
	d := startDemo(t, fastPushes, allow(rc))
	ctx := context.Background()
	env := d.podctlEnv()
	v := d.variant(t, "ACTIVE", "tshirt")

	// Every dead-letter series exists, at 0, before anything went wrong.
	counts := deadLetterCounts(t, d)
	for _, c := range []string{"order-decider", "webhook-decider", "fulfillment-bridge", "projections.catalog",
		"projections.orders", "projections.deliveries", "delivery.fanout", "delivery.sender"} {
		if n, ok := counts[c]; !ok || n != 0 {
			t.Fatalf("pod_consumer_dead_letters_total{consumer=%q} = %v, %v before any dead letter", c, n, ok)
		}
	}

	// Commands written by the service itself, to copy with a NUL planted.
	r := d.client.Do("POST", "/v1/me/webhooks", map[string]any{"url": rc.url("/dlq"), "topics": []string{"order.created"}})
	if r.Status != 201 {
		t.Fatalf("create webhook: %d %s", r.Status, r.Body)
	}
	r = d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "dlq-template", 1))
	if r.Status != 201 {
		t.Fatalf("create order: %d %s", r.Status, r.Body)
	}
	orderCmd := createCommand(t, d, schemas.TopicOrderCommands)
	orderCmd["id"], orderCmd["order_id"] = uuid.NewString(), uuid.NewString()
	orderCmd["reference_id"] = "nul\x00ref"
	webhookCmd := createCommand(t, d, schemas.TopicWebhookCommands)
	webhookCmd["id"], webhookCmd["webhook_id"] = uuid.NewString(), uuid.NewString()
	webhookCmd["description"] = "nul\x00description"
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `\u0000`) {
			t.Fatalf("no NUL in %s", b)
		}
		return b
	}
	notJSON := []byte("\x01 this is not JSON")
	orderEventStages := []string{"projections.orders", "delivery.fanout"}
	// The order decider's two poisons are dead-lettered in this order:
	// the record it cannot read is dead letter 0, the create dead letter
	// 1 (planted once 0 is there), which the replays below rely on.
	poisons := []*poison{
		{topic: schemas.TopicOrderCommands, key: "poison-order-bytes", value: notJSON, consumers: []string{"order-decider"}},
		{topic: schemas.TopicOrderCommands, key: "poison-order-nul", value: mustJSON(orderCmd), consumers: []string{"order-decider"}},
		{topic: schemas.TopicWebhookCommands, key: "poison-webhook-nul", value: mustJSON(webhookCmd), consumers: []string{"webhook-decider"}},
		{topic: schemas.TopicWebhookCommands, key: "poison-webhook-bytes", value: notJSON, consumers: []string{"webhook-decider"}},
		{topic: schemas.TopicFulfillmentUpdates, key: "poison-fulfillment", value: notJSON, consumers: []string{"fulfillment-bridge"}},
		{topic: schemas.TopicCatalogEvents, key: "poison-catalog", value: notJSON, consumers: []string{"projections.catalog"}},
		{topic: schemas.TopicOrderEvents, key: "poison-order-event", value: notJSON, consumers: orderEventStages},
		{topic: schemas.TopicWebhookDeliveries, key: "poison-delivery", value: notJSON, consumers: []string{"projections.deliveries", "delivery.sender"}},
		{topic: schemas.WebhookRetryTiers[0], key: "poison-tier", value: notJSON, consumers: []string{"delivery.sender"}},
		{topic: schemas.TopicWebhookAttempts, key: "poison-attempt", value: notJSON, consumers: []string{"projections.deliveries"}},
		{topic: schemas.TopicWebhookEvents, key: "poison-webhook-event", value: notJSON, consumers: []string{"projections.deliveries"}},
	}
	want := map[string]int{} // dead letters per consumer
	for _, p := range poisons {
		if p.key == "poison-order-nul" {
			deadLetters(t, d, "order-decider", 1)
		}
		rec := &kgo.Record{Topic: d.topic(p.topic), Key: []byte(p.key), Value: p.value,
			Headers: []kgo.RecordHeader{{Key: "planted-by", Value: []byte("e2e")}}}
		if err := d.app.Producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		p.partition, p.offset = rec.Partition, rec.Offset
		for _, c := range p.consumers {
			want[c]++
		}
	}

	// Valid records after the poison flow: an order reaches SUCCESS (order
	// decider, order projector, push worker), a webhook is created
	// (webhook decider), and the order's webhook delivery is made (fan-out).
	r = d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "dlq-after", 1))
	if r.Status != 201 {
		t.Fatalf("create order after the poison: %d %s", r.Status, r.Body)
	}
	var after orderrm.Order
	r.JSON(t, &after)
	d.waitStatus(t, d.client, after.OrderID, "SUCCESS")
	r = d.client.Do("POST", "/v1/me/webhooks", map[string]any{"url": rc.url("/dlq-after"), "topics": []string{"order.created"}})
	if r.Status != 201 {
		t.Fatalf("create webhook after the poison: %d %s", r.Status, r.Body)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, got := range rc.requests() {
			if strings.Contains(string(got.Body), after.OrderID.String()) {
				return nil
			}
		}
		return fmt.Errorf("no webhook delivery of order %s yet", after.OrderID)
	})
	// Every stage stored an offset past its poison.
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, p := range poisons {
		for _, c := range p.consumers {
			if c == "delivery.sender" {
				continue // it keeps no offsets in Postgres; its dead letters below show it got past
			}
			if err := stream.WaitApplied(waitCtx, d.app.Work, c, d.topic(p.topic), map[int32]int64{p.partition: p.offset}); err != nil {
				t.Fatalf("%s did not get past the poison on %s: %v", c, p.topic, err)
			}
		}
	}

	// The dead letters: same key, value and headers, plus the error and origin.
	for c, n := range want {
		byKey := map[string]*kgo.Record{}
		for _, dl := range deadLetters(t, d, c, n) {
			byKey[string(dl.Key)] = dl
		}
		for _, p := range poisons {
			if !slices.Contains(p.consumers, c) {
				continue
			}
			dl := byKey[p.key]
			switch {
			case dl == nil:
				t.Errorf("%s: no dead letter of %s", c, p.key)
				continue
			case string(dl.Value) != string(p.value) || stream.Header(dl, "planted-by") != "e2e":
				t.Errorf("%s: dead letter %s lost its value or headers", c, p.key)
			case stream.Header(dl, stream.HeaderDLQTopic) != d.topic(p.topic) || stream.Header(dl, stream.HeaderDLQConsumer) != c ||
				stream.Header(dl, stream.HeaderDLQOffset) != strconv.FormatInt(p.offset, 10) ||
				stream.Header(dl, stream.HeaderDLQPartition) != strconv.Itoa(int(p.partition)) || stream.Header(dl, stream.HeaderDLQTime) == "":
				t.Errorf("%s: dead letter %s headers %v", c, p.key, dl.Headers)
			case stream.Header(dl, stream.HeaderDLQError) == "":
				t.Errorf("%s: dead letter %s has no error", c, p.key)
			}
		}
	}
	for _, dl := range deadLetters(t, d, "order-decider", 2) {
		if e := stream.Header(dl, stream.HeaderDLQError); string(dl.Key) == "poison-order-nul" && !strings.Contains(e, "22P05") {
			t.Errorf("order decider's NUL command: error %q does not name SQLSTATE 22P05", e)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		got := deadLetterCounts(t, d)
		for c, n := range want {
			if got[c] != float64(n) {
				return fmt.Errorf("pod_consumer_dead_letters_total{consumer=%q} = %v, want %d", c, got[c], n)
			}
		}
		return nil
	})

	// podctl dlq list shows them.
	type line struct {
		Consumer  string `json:"consumer"`
		DLQOffset int64  `json:"dlq_offset"`
		Topic     string `json:"topic"`
		Offset    int64  `json:"offset"`
		Error     string `json:"error"`
		Time      string `json:"time"`
		Key       string `json:"key"`
		Replayed  bool   `json:"replayed"`
		Skipped   string `json:"skipped"`
	}
	list := func(args ...string) []line {
		t.Helper()
		r := runPodctl(t, bin, env, append([]string{"dlq", "list"}, args...)...)
		if r.err != nil {
			t.Fatalf("dlq list: %v\n%s", r.err, r.stderr)
		}
		var out []line
		sc := bufio.NewScanner(strings.NewReader(r.stdout))
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("dlq list line %q: %v", sc.Text(), err)
			}
			out = append(out, l)
		}
		return out
	}
	all := list()
	total := 0
	for _, n := range want {
		total += n
	}
	if len(all) != total {
		t.Fatalf("dlq list printed %d dead letters, want %d: %+v", len(all), total, all)
	}
	ls := list("--consumer", "order-decider")
	value := map[string][]byte{}
	for _, p := range poisons {
		value[p.key] = p.value
	}
	if len(ls) != 2 || ls[0].DLQOffset != 0 || ls[1].DLQOffset != 1 {
		t.Fatalf("dlq list --consumer order-decider: %+v", ls)
	}
	for i, l := range ls {
		p := poisons[i] // the order decider's two, in the order they were planted
		if l.Key != p.key || l.Consumer != "order-decider" || l.Topic != d.topic(schemas.TopicOrderCommands) || l.Offset != p.offset ||
			l.Error == "" || l.Time == "" || l.Replayed {
			t.Fatalf("dlq list --consumer order-decider: %+v", l)
		}
	}

	// podctl dlq replay re-drives the first dead letter (dlq offset 0) to
	// pod.order.commands;
	// its cause is still there, so it is dead-lettered again (a third one).
	replay := func(args ...string) podctlRun {
		t.Helper()
		r := runPodctl(t, bin, env, append([]string{"dlq", "replay", "--consumer", "order-decider"}, args...)...)
		if r.err != nil {
			t.Fatalf("dlq replay %v: %v\n%s", args, r.err, r.stderr)
		}
		return r
	}
	rr := replay("--offset", "0")
	var replayed struct {
		DLQOffset int64  `json:"dlq_offset"`
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
	}
	if err := json.Unmarshal([]byte(rr.stdout), &replayed); err != nil || replayed.DLQOffset != 0 || replayed.Topic != d.topic(schemas.TopicOrderCommands) {
		t.Fatalf("dlq replay --offset 0 printed %q (%v)", rr.stdout, err)
	}
	err := scanTopic(t, d.app.Brokers, d.topic(schemas.TopicOrderCommands), 20*time.Second, func(r *kgo.Record) bool {
		if r.Partition != replayed.Partition || r.Offset != replayed.Offset {
			return false
		}
		if string(r.Key) != ls[0].Key || string(r.Value) != string(value[ls[0].Key]) || stream.Header(r, stream.HeaderDLQError) != "" ||
			stream.Header(r, "planted-by") != "e2e" {
			t.Errorf("replayed record: key %q headers %v", r.Key, r.Headers)
		}
		return true
	})
	if err != nil {
		t.Fatalf("replayed record not on %s: %v", schemas.TopicOrderCommands, err)
	}
	third := deadLetters(t, d, "order-decider", 3)[2]
	if string(third.Key) != ls[0].Key || stream.Header(third, stream.HeaderDLQOffset) != strconv.FormatInt(replayed.Offset, 10) {
		t.Fatalf("the replayed record was not dead-lettered again: %q at %s", third.Key, stream.Header(third, stream.HeaderDLQOffset))
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := deadLetterCounts(t, d)["order-decider"]; n != 3 {
			return fmt.Errorf("order-decider dead letters: %v, want 3", n)
		}
		return nil
	})

	// Nothing is replayed twice: offset 0 again replays nothing; offset 1
	// replays only dead letter 1.
	if rr := replay("--offset", "0"); rr.stdout != "" || !strings.Contains(rr.stderr, "nothing to replay") {
		t.Fatalf("second replay of offset 0: %q %q", rr.stdout, rr.stderr)
	}
	rr = replay("--offset", "1")
	if strings.Count(rr.stdout, "\n") != 1 || !strings.Contains(rr.stdout, `"dlq_offset":1`) {
		t.Fatalf("replay --offset 1 printed %q", rr.stdout)
	}
	// Dead letter 1 is the create: refused for good when it was
	// dead-lettered (its sender learnt the order was not created), so the
	// replay passes it: put back, it would make the order once its
	// refusal is pruned.
	var code string
	if err := d.app.Pool.QueryRow(ctx, `SELECT coalesce(error_code, '') FROM order_decisions WHERE command_id = $1`, orderCmd["id"]).Scan(&code); err != nil ||
		code != schemas.CodeInternal {
		t.Fatalf("the dead-lettered create's decision: %q (%v), want its refusal, %s", code, err, schemas.CodeInternal)
	}
	var passed struct {
		Skipped string `json:"skipped"`
	}
	if err := json.Unmarshal([]byte(rr.stdout), &passed); err != nil || !strings.Contains(passed.Skipped, "refused") {
		t.Fatalf("replay --offset 1 printed %q (%v); want the create passed as refused", rr.stdout, err)
	}
	// The list says which were put back and which passed, and why (found
	// by review: the passed create was listed as replayed).
	ls = list("--consumer", "order-decider")
	if len(ls) < 3 || !ls[0].Replayed || ls[1].Replayed || !strings.Contains(ls[1].Skipped, "refused") || ls[2].Replayed {
		t.Fatalf("dlq list after the replays: %+v", ls)
	}

	// One replay of a consumer at a time: a second one, started while the
	// first holds the consumer's lock, is refused.
	held, err := d.app.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lockKey := "podctl.dlq-replay " + d.app.Naming.DeadLetterTopic("order-decider")
	if _, err := held.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, lockKey); err != nil {
		t.Fatal(err)
	}
	rr = runPodctl(t, bin, env, "dlq", "replay", "--consumer", "order-decider")
	if _, err := held.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, lockKey); err != nil {
		t.Fatal(err)
	}
	held.Release()
	if rr.err == nil || !strings.Contains(rr.stderr, "another dlq replay of order-decider is running") || rr.stdout != "" {
		t.Fatalf("a replay beside a running one: %v %q %q", rr.err, rr.stdout, rr.stderr)
	}

	// Found by review: the position was a Kafka group's commit, which the
	// broker forgets 7 days after its last commit, and the next replay
	// re-drove everything. It is kept in Postgres now; a position the
	// previous release committed is read while there is no row, and once
	// a replay stored one the group may go.
	group := d.cfg.Naming().Group("podctl.dlq-replay.webhook-decider")
	adm := kadm.NewClient(d.app.Producer)
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: d.app.Naming.DeadLetterTopic("webhook-decider"), Partition: 0, At: 1, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, group, offs); err != nil {
		t.Fatal(err)
	}
	// Dead letter 0, below that position, is a webhook create: refused as
	// it was dead-lettered (its request answered), so listed as skipped,
	// not replayed.
	var webhookCode string
	if err := d.app.Pool.QueryRow(ctx, `SELECT coalesce(error_code, '') FROM webhook_decisions WHERE command_id = $1`, webhookCmd["id"]).
		Scan(&webhookCode); err != nil || webhookCode != schemas.CodeInternal {
		t.Fatalf("the dead-lettered webhook create's decision: %q (%v), want its refusal, %s", webhookCode, err, schemas.CodeInternal)
	}
	if ls := list("--consumer", "webhook-decider"); len(ls) != 2 || ls[0].Replayed || !strings.Contains(ls[0].Skipped, "refused") || ls[1].Replayed {
		t.Fatalf("dlq list under the previous release's position: %+v", ls)
	}
	webhookReplay := func(args ...string) podctlRun {
		t.Helper()
		r := runPodctl(t, bin, env, append([]string{"dlq", "replay", "--consumer", "webhook-decider"}, args...)...)
		if r.err != nil {
			t.Fatalf("dlq replay --consumer webhook-decider: %v\n%s", r.err, r.stderr)
		}
		return r
	}
	if rr := webhookReplay(); strings.Count(rr.stdout, "\n") != 1 || !strings.Contains(rr.stdout, `"dlq_offset":1`) {
		t.Fatalf("replay from the previous release's position printed %q", rr.stdout)
	}
	if _, err := adm.DeleteGroups(ctx, group); err != nil {
		t.Fatal(err)
	}
	// The replayed record is poison still and comes back as dead letter 2
	// whenever the decider gets to it (the real cluster's CI run saw it
	// first); up to offset 1 there is nothing left to replay, where a
	// position read from the forgotten group would replay 0 and 1.
	if rr := webhookReplay("--offset", "1"); rr.stdout != "" || !strings.Contains(rr.stderr, "nothing to replay") {
		t.Fatalf("a replay once the broker forgot the group: %q %q", rr.stdout, rr.stderr)
	}

	// A read model's dead letters are not re-driven one by one: the
	// projector passed over its entity's later events; the answer says to
	// rebuild it instead, and nothing is produced.
	before := deadLetters(t, d, orderrm.ConsumerName, want[orderrm.ConsumerName])
	rr = runPodctl(t, bin, env, "dlq", "replay", "--consumer", orderrm.ConsumerName)
	if rr.err == nil || !strings.Contains(rr.stderr, "podctl replay --projection orders") || rr.stdout != "" {
		t.Fatalf("dlq replay of the order read model: %v %q %q", rr.err, rr.stdout, rr.stderr)
	}
	if ls := list("--consumer", orderrm.ConsumerName); len(ls) != len(before) || ls[0].Replayed {
		t.Fatalf("the order read model's dead letters after the refused replay: %+v", ls)
	}
	// The rebuild it points to meets the poison again and passes it: its
	// dead letter is there already (each rebuild added one more before).
	if rr := runPodctl(t, bin, env, "replay", "--projection", "orders", "--wait", "1m"); rr.err != nil || !strings.Contains(rr.stdout, `"rebuilt": true`) {
		t.Fatalf("replay --projection orders: %v\nstdout %s\nstderr %s", rr.err, rr.stdout, rr.stderr)
	}
	if ls := list("--consumer", orderrm.ConsumerName); len(ls) != len(before) {
		t.Fatalf("the order read model's dead letters after its rebuild: %+v, want the %d there before", ls, len(before))
	}

	// Found by review: the delivery log's dead letters went back to their
	// topics, its delivery task to the sender's topic too, and a task sent
	// again after its done-mark expired is a second request to the client.
	// Its attempt result and webhook event go back (and are dead-lettered
	// again, their cause still there); its delivery task is passed.
	logBefore := deadLetterCounts(t, d)
	rr = runPodctl(t, bin, env, "dlq", "replay", "--consumer", deliveryrm.ConsumerName)
	if rr.err != nil {
		t.Fatalf("dlq replay --consumer %s: %v\n%s", deliveryrm.ConsumerName, rr.err, rr.stderr)
	}
	skipped := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(rr.stdout), "\n") {
		var l struct{ Key, Skipped string }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("dlq replay printed %q: %v", line, err)
		}
		skipped[l.Key] = l.Skipped
	}
	if len(skipped) != 3 || !strings.Contains(skipped["poison-delivery"], delivery.SenderGroup) ||
		skipped["poison-attempt"] != "" || skipped["poison-webhook-event"] != "" {
		t.Fatalf("dlq replay --consumer %s printed %q", deliveryrm.ConsumerName, rr.stdout)
	}
	waitCaughtUp(t, d, deliveryrm.ConsumerName, schemas.TopicWebhookDeliveries, schemas.TopicWebhookAttempts, schemas.TopicWebhookEvents)
	waitCaughtUp(t, d, delivery.SenderGroup, schemas.TopicWebhookDeliveries)
	logAfter := deadLetterCounts(t, d)
	if logAfter[deliveryrm.ConsumerName] != logBefore[deliveryrm.ConsumerName]+2 || logAfter[delivery.SenderGroup] != logBefore[delivery.SenderGroup] {
		t.Fatalf("dead letters after the delivery log's replay: %v, before %v (want the log's 2 more, the sender's the same)", logAfter, logBefore)
	}
}

// A command too large for the order decider's dead-letter topic whole (a
// topic with a lower max.message.bytes than the command topic) is
// dead-lettered by its place: podctl dlq list says how many bytes it left
// out, and dlq replay puts the command back whole, read from its topic, or
// passes it, saying so, once retention deleted it there.
func TestADeadLetterTooLargeForItsTopicIsReplayedFromWhereItWas(t *testing.T) {
	bin := buildPodctl(t)
	d := startDemo(t)
	ctx := context.Background()
	env := d.podctlEnv()
	v := d.variant(t, "ACTIVE", "tshirt")
	create(t, d.client, tshirtOrder(v.VariantID, "dlq-large-template", 1))
	adm := kadm.NewClient(d.app.Producer)
	dlTopic := d.app.Naming.DeadLetterTopic("order-decider")
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("4000")}}, dlTopic)
	if err == nil {
		_, err = altered.On(dlTopic, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	// A record the decider cannot read, larger than the dead-letter topic
	// takes. (Not a create Postgres refuses: a dead-lettered create is
	// refused for good, and a replay passes it.)
	padding := make([]byte, 4000)
	if _, err := rand.Read(padding); err != nil {
		t.Fatal(err)
	}
	value := []byte("\x01 not a command " + hex.EncodeToString(padding))
	commands := d.topic(schemas.TopicOrderCommands)
	rec := &kgo.Record{Topic: commands, Key: []byte("poison-large"), Value: value,
		Headers: []kgo.RecordHeader{{Key: "planted-by", Value: []byte("e2e")}}}
	if err := d.app.Producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	size := len(value) + len("planted-by") + len("e2e") // the key, short, is kept

	dl := deadLetters(t, d, "order-decider", 1)[0]
	if len(dl.Value) != 0 || string(dl.Key) != string(rec.Key) || stream.Header(dl, stream.HeaderDLQDropped) != strconv.Itoa(size) ||
		stream.Header(dl, stream.HeaderDLQOffset) != strconv.FormatInt(rec.Offset, 10) || !strings.Contains(stream.Header(dl, stream.HeaderDLQError), "invalid character") {
		t.Fatalf("dead letter of %d bytes with headers %v; want none, and %s %d", len(dl.Value), dl.Headers, stream.HeaderDLQDropped, size)
	}
	r := runPodctl(t, bin, env, "dlq", "list", "--consumer", "order-decider")
	var listed struct {
		Offset  int64  `json:"offset"`
		Key     string `json:"key"`
		Dropped int    `json:"dropped_bytes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || listed.Dropped != size || listed.Offset != rec.Offset || listed.Key != string(rec.Key) {
		t.Fatalf("dlq list printed %q (%v), want dropped_bytes %d at offset %d", r.stdout, err, size, rec.Offset)
	}

	// The replay reads the command back and puts it on its topic whole; it
	// is dead-lettered again, its cause still there.
	r = runPodctl(t, bin, env, "dlq", "replay", "--consumer", "order-decider")
	var replayed struct {
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Skipped   string `json:"skipped"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &replayed); err != nil || replayed.Skipped != "" {
		t.Fatalf("dlq replay printed %q (%v); %s", r.stdout, err, r.stderr)
	}
	err = scanTopic(t, d.app.Brokers, commands, 20*time.Second, func(got *kgo.Record) bool {
		if got.Partition != replayed.Partition || got.Offset != replayed.Offset {
			return false
		}
		if string(got.Key) != string(rec.Key) || string(got.Value) != string(value) || stream.Header(got, "planted-by") != "e2e" {
			t.Errorf("replayed record: key %q, %d bytes of value, headers %v; want the command whole", got.Key, len(got.Value), got.Headers)
		}
		return true
	})
	if err != nil {
		t.Fatalf("the replayed command is not on %s: %v", commands, err)
	}
	again := deadLetters(t, d, "order-decider", 2)[1]

	// Once retention deleted it from the command topic, a replay passes it.
	deleted, err := adm.DeleteRecords(ctx, kadm.Offsets{commands: {replayed.Partition: {Topic: commands, Partition: replayed.Partition, At: replayed.Offset + 1}}})
	if err == nil {
		err = deleted.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	r = runPodctl(t, bin, env, "dlq", "replay", "--consumer", "order-decider")
	if err := json.Unmarshal([]byte(r.stdout), &replayed); err != nil || !strings.Contains(replayed.Skipped, "no longer holds offset") ||
		!strings.Contains(r.stderr, fmt.Sprintf("dead letter %d not replayed", again.Offset)) {
		t.Fatalf("dlq replay after the record was deleted printed %q and %q (%v)", r.stdout, r.stderr, err)
	}
}
