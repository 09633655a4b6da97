package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/testenv"
	catalogrm "github.com/printpod/pod/projections/catalog"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fastPushes makes automatic push retries quick enough for tests.
func fastPushes(c *config.Config) {
	c.PushRetryDelays = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}
}

// variant returns a variant of an ACTIVE product of category in the demo
// store with storeStatus.
func (d demoEnv) variant(t testing.TB, storeStatus, category string) catalogrm.Variant {
	t.Helper()
	st := d.store(t, storeStatus)
	var page struct{ Data []catalogrm.Product }
	d.client.Get("/v1/stores/"+st.StoreID.String()+"/products?status=ACTIVE&limit=100").JSON(t, &page)
	for _, p := range page.Data {
		for _, v := range p.Variants {
			if v.Category == category {
				return v
			}
		}
	}
	t.Fatalf("no ACTIVE %s variant in the %s demo store", category, storeStatus)
	return catalogrm.Variant{}
}

// tshirtOrder is a valid standard order of one t-shirt line.
func tshirtOrder(variant uuid.UUID, ref string, qty int) map[string]any {
	body := map[string]any{
		"customer": map[string]any{"email": "ada@example.com", "first_name": "Ada", "last_name": "Lovelace"},
		"shipping_address": map[string]any{"address1": "1 Main St", "city": "Austin", "province": "TX",
			"country_code": "US", "zip": "78701"},
		"line_items": []any{map[string]any{"variant_id": variant, "quantity": qty,
			"sides": map[string]any{"front_side": "https://img.example.com/" + ref + ".png"}}},
	}
	if ref != "" {
		body["reference_id"] = ref
	}
	return body
}

type orderDetail struct {
	orderrm.Order
	Customer         map[string]any    `json:"customer"`
	ShippingAddress  map[string]any    `json:"shipping_address"`
	LineItems        []map[string]any  `json:"line_items"`
	DeliveryAttempts []orderrm.Attempt `json:"delivery_attempts"`
	Tracking         map[string]any    `json:"tracking"`
	PlatformOrderID  *string           `json:"platform_order_id"`
}

func (d demoEnv) detail(t testing.TB, c *testenv.Client, id uuid.UUID) orderDetail {
	t.Helper()
	r := c.Get("/v1/orders/pod/" + id.String())
	if r.Status != 200 {
		t.Fatalf("GET order %s: %d %s", id, r.Status, r.Body)
	}
	var o orderDetail
	r.JSON(t, &o)
	return o
}

// waitStatus waits until the order reaches status.
func (d demoEnv) waitStatus(t testing.TB, c *testenv.Client, id uuid.UUID, status string) orderDetail {
	t.Helper()
	var o orderDetail
	testenv.Eventually(t, 30*time.Second, func() error {
		o = d.detail(t, c, id)
		if o.Status != status {
			return fmt.Errorf("order %s is %s, waiting for %s", id, o.Status, status)
		}
		return nil
	})
	return o
}

func doRaw(t testing.TB, req *http.Request) testenv.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// scanTopic reads topic from the start and hands each record to each, in
// log order, until each answers done: the fetch in which it first does is
// still handed over whole, then scanning stops. It returns an error when
// timeout passes first; callers fail with their own message.
func scanTopic(t testing.TB, brokers []string, topic string, timeout time.Duration, each func(*kgo.Record) (done bool)) error {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("reading %s: %w", topic, ctx.Err())
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if each(r) {
				done = true
			}
		})
		if done {
			return nil
		}
	}
}

// readToEnd calls each for every record topic (a cluster name) holds now,
// up to the log end each partition had when it was called. Unlike a scan
// for a while, it cannot take a slow first fetch for an empty topic.
func readToEnd(t testing.TB, d demoEnv, topic string, each func(*kgo.Record)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last, _, err := kafka.LastOffsets(ctx, kadm.NewClient(d.app.Producer), topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(last) == 0 {
		return
	}
	err = scanTopic(t, d.app.Brokers, topic, 30*time.Second, func(r *kgo.Record) bool {
		if end, ok := last[r.Partition]; ok && r.Offset <= end {
			each(r)
			if r.Offset == end {
				delete(last, r.Partition)
			}
		}
		return len(last) == 0
	})
	if err != nil {
		t.Fatalf("read %s to its end: %v (partitions left: %v)", topic, err, last)
	}
}

// orderEvents reads pod.order.events from the start until it has want
// events of the order, deduplicated by event id, in log order; each is
// checked against its JSON Schema.
func orderEvents(t *testing.T, d demoEnv, id uuid.UUID, want int) []schemas.Event {
	t.Helper()
	var out []schemas.Event
	if want <= 0 {
		return out
	}
	seen := map[uuid.UUID]bool{}
	err := scanTopic(t, d.app.Brokers, d.topic(schemas.TopicOrderEvents), 20*time.Second, func(r *kgo.Record) bool {
		if string(r.Key) == id.String() {
			ev, err := schemas.ParseEvent(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if err := schemas.ValidateEvent(r.Value); err != nil {
				t.Errorf("event %s %s does not match its schema: %v\n%s", ev.Type, ev.ID, err, r.Value)
			}
			if !seen[ev.ID] {
				seen[ev.ID] = true
				out = append(out, ev)
			}
		}
		return len(out) >= want
	})
	if err != nil {
		t.Fatalf("got %d of %d events of order %s", len(out), want, id)
	}
	return out
}

func newJSONRequest(c *testenv.Client, path string, raw []byte) (*http.Request, error) {
	return newRequest(c, "POST", path, raw)
}

func newRequest(c *testenv.Client, method, path string, raw []byte) (*http.Request, error) {
	req, err := http.NewRequest(method, c.Base+path, bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// postWithKey POSTs the JSON body to path as c, with an Idempotency-Key.
func postWithKey(t testing.TB, c *testenv.Client, path, key string, body []byte) testenv.Response {
	t.Helper()
	return doWithKey(t, c, "POST", path, key, body)
}

// doWithKey sends the JSON body to path as c, with an Idempotency-Key.
func doWithKey(t testing.TB, c *testenv.Client, method, path, key string, body []byte) testenv.Response {
	t.Helper()
	req, err := newRequest(c, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	return doRaw(t, req)
}

// waitCaughtUp waits until consumer group (a logical name) has committed
// every record on the topics (logical names) produced so far. Stages
// commit to Kafka only after their Postgres transaction, and the sender
// only after a task is done, so a caught-up group has applied them all:
// a test that must show something did NOT happen waits for this instead
// of sleeping.
func waitCaughtUp(t testing.TB, d demoEnv, group string, topics ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.app.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	naming := d.cfg.Naming()
	testenv.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, committed, err := groupProgress(ctx, adm, naming.Group(group), naming.Topics(topics...))
		if err != nil {
			return err
		}
		var behind error
		ends.Each(func(e kadm.ListedOffset) {
			c, ok := committed.Lookup(e.Topic, e.Partition)
			if e.Offset > 0 && (!ok || c.At < e.Offset) {
				behind = fmt.Errorf("%s is behind on %s/%d (committed %d of %d)", group, e.Topic, e.Partition, c.At, e.Offset)
			}
		})
		return behind
	})
}

// groupProgress reads the end offsets of topics and what group committed
// on them (cluster names).
func groupProgress(ctx context.Context, adm *kadm.Client, group string, topics []string) (kadm.ListedOffsets, kadm.OffsetResponses, error) {
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	return ends, committed, err
}

// waitPushesSettled waits until the order decider and the order projector
// have applied everything on their topics and no push job of ids is due or
// being worked (a parked one waits for a manual retry), so what the read
// model shows of those orders is final (nothing more is coming).
func waitPushesSettled(t testing.TB, d demoEnv, ids ...uuid.UUID) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		var n int
		if err := d.app.Pool.QueryRow(context.Background(), `SELECT count(*) FROM jobs
			WHERE queue = $1 AND id = ANY($2) AND step <> $3`, order.PushQueue, ids, order.StepParked).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%d push jobs still queued or running", n)
		}
		return nil
	})
	waitCaughtUp(t, d, order.DeciderName, schemas.TopicOrderCommands)
	waitCaughtUp(t, d, orderrm.ConsumerName, schemas.TopicOrderEvents)
}

// waitTopicHolds waits until the topics (logical names) hold at least n
// records together.
func waitTopicHolds(t testing.TB, d demoEnv, n int64, topics ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.app.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	testenv.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, d.cfg.Naming().Topics(topics...)...)
		if err != nil {
			return err
		}
		var total int64
		ends.Each(func(e kadm.ListedOffset) { total += e.Offset })
		if total < n {
			return fmt.Errorf("%d of %d records so far", total, n)
		}
		return nil
	})
}
