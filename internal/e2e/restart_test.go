package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/cmd/podsvc/app"
	"github.com/printpod/pod/commands/catalog"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
	catalogrm "github.com/printpod/pod/projections/catalog"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// topicSize is the number of records ever written to topic (its name on
// the broker), read again while a partition has no leader (a broker just
// started).
func topicSize(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var n int64
	testenv.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, n, err = kafka.LastOffsets(ctx, kadm.NewClient(cl), topic)
		return err
	})
	return n
}

// TestRestartKeepsEverything stops podsvc and starts it again on the same
// POD_DATA_DIR and database: the embedded broker's log, accounts, tokens and
// the catalog are all still there, and the demo catalog is not published again.
func TestRestartKeepsEverything(t *testing.T) {
	d := startDemo(t)
	ctx := context.Background()
	_, token := d.newAccount(t, "before-restart")
	logBefore := topicSize(t, d.app.Brokers, d.topic(schemas.TopicCatalogEvents))
	if logBefore == 0 {
		t.Fatal("the demo catalog was not published to the log")
	}
	var before productPage
	active := d.store(t, "ACTIVE")
	before = d.products(t, active.StoreID, q("limit", "100"))

	d.app.Stop()
	if r, err := d.client.HTTP.Get("http://" + d.app.Addr() + "/healthz"); err == nil {
		r.Body.Close()
		t.Fatal("the API still answers after Stop")
	}

	again := podtest.Start(t, d.cfg)
	c := testenv.NewClient(t, "http://"+again.Addr(), d.cfg.DemoToken)
	d2 := demoEnv{app: again, cfg: d.cfg, client: c}
	waitDemoCatalog(t, &d2)
	after := d2.products(t, active.StoreID, q("limit", "100"))
	if len(after.Data) != len(before.Data) {
		t.Fatalf("%d products after restart, %d before", len(after.Data), len(before.Data))
	}
	for i := range before.Data {
		if before.Data[i].ProductID != after.Data[i].ProductID || len(before.Data[i].Variants) != len(after.Data[i].Variants) {
			t.Fatalf("product %d differs after restart", i)
		}
	}
	if got := topicSize(t, again.Brokers, d.topic(schemas.TopicCatalogEvents)); got != logBefore {
		t.Fatalf("catalog log has %d records after restart, %d before (lost, or the demo catalog was republished)", got, logBefore)
	}
	if r := testenv.NewClient(t, "http://"+again.Addr(), token).Get("/v1/stores"); r.Status != 200 {
		t.Fatalf("token made before the restart: %d", r.Status)
	}

	// The projector resumes from its stored offsets: they sum to the log's
	// size (nothing skipped, nothing re-read), and an import after the
	// restart is applied.
	var applied int64
	if err := again.Pool.QueryRow(ctx, `SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE consumer = 'projections.catalog'`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != logBefore {
		t.Fatalf("projector stored offsets sum %d, log has %d records", applied, logBefore)
	}
	acct, tok := d2.newAccount(t, "after-restart")
	f, err := catalog.Parse(strings.NewReader(`{"stores":[{"name":"Late","shop_domain":"late.myshopify.com","status":"ACTIVE",
		"products":[{"title":"Late Tee","status":"ACTIVE","variants":[{"title":"M","sku":"LT-M","price":"10","category":"tshirt"}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	importAndWait(t, d2, acct, f)
	var late struct{ Data []catalogrm.Store }
	testenv.NewClient(t, "http://"+again.Addr(), tok).Get("/v1/stores").JSON(t, &late)
	if len(late.Data) != 1 || late.Data[0].Name != "Late" {
		t.Fatalf("import after restart: %+v", late.Data)
	}
}

func TestHealthReadinessMetrics(t *testing.T) {
	d := startDemo(t)
	c := testenv.NewClient(t, "http://"+d.app.Addr(), "")
	if r := c.Get("/healthz"); r.Status != 200 {
		t.Fatalf("healthz: %d", r.Status)
	}
	r := c.Get("/readyz")
	var ready struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	r.JSON(t, &ready)
	if r.Status != 200 || ready.Status != "ready" || ready.Checks["postgres"] != "ok" || ready.Checks["redis"] != "ok" || ready.Checks["kafka"] != "ok" {
		t.Fatalf("readyz: %d %s", r.Status, r.Body)
	}
	d.client.Get("/v1/stores")
	m := c.Get("/metrics")
	for _, want := range []string{
		`pod_http_requests_total{method="GET",route="/v1/stores",status="200"}`,
		`pod_consumer_records_total{consumer="projections.catalog"}`,
		`pod_kafka_`,
	} {
		if !contains(m.Body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// With Redis unreachable the service is degraded, still ready (taking
	// every instance out of service would fail every request), and serves
	// reads.
	cfg := d.cfg
	cfg.RedisURL = "redis://127.0.0.1:1/0"
	cfg.DataDir = t.TempDir()
	cfg.Roles = []string{"api"}
	cfg.DemoToken = ""
	noRedis := podtest.Start(t, cfg)
	c2 := testenv.NewClient(t, "http://"+noRedis.Addr(), d.cfg.DemoToken)
	if r := c2.Get("/readyz"); r.Status != 200 || !contains(r.Body, `"degraded"`) || !contains(r.Body, `"redis":"unavailable"`) {
		t.Fatalf("readyz without Redis: %d %s; want 200, degraded, naming Redis", r.Status, r.Body)
	}
	if r := c2.Get("/v1/stores"); r.Status != 200 {
		t.Fatalf("reads without Redis (rate limit degrades): %d %s", r.Status, r.Body)
	}

	// Found by review: with a Redis that takes connections and never
	// answers (a partition), its check used up the time the checks shared,
	// and Kafka's then failed too: 503. Each check has its own time.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never answered, until the test ends
		}
	}()
	cfg.RedisURL = "redis://" + silent.Addr().String() + "/0"
	cfg.DataDir = t.TempDir()
	hung := podtest.Start(t, cfg)
	c3 := testenv.NewClient(t, "http://"+hung.Addr(), "")
	if r := c3.Get("/readyz"); r.Status != 200 || !contains(r.Body, `"degraded"`) || !contains(r.Body, `"kafka":"ok"`) {
		t.Fatalf("readyz with a Redis that never answers: %d %s; want 200, degraded, Kafka ok", r.Status, r.Body)
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }

// TestRevokedDemoTokenStaysRevokedAfterRestart: podsvc ensures the demo
// account and token at every start outside production, but a demo token
// the operator revoked stays revoked: the restart must not re-activate it.
func TestRevokedDemoTokenStaysRevokedAfterRestart(t *testing.T) {
	bin := buildPodctl(t)
	d := startDemo(t)
	env := d.podctlEnv()
	if r := runPodctl(t, bin, env, "token", "revoke", "--token", d.cfg.DemoToken); r.err != nil {
		t.Fatalf("token revoke: %v %s", r.err, r.stderr)
	}
	// The revocation reaches the service's token cache by a Postgres
	// announcement, moments after podctl's commit.
	testenv.Eventually(t, 5*time.Second, func() error {
		if r := d.client.Get("/v1/stores"); r.Status != 401 {
			return fmt.Errorf("revoked demo token before the restart: %d %s", r.Status, r.Body)
		}
		return nil
	})
	d.app.Stop()

	again := podtest.Start(t, d.cfg)
	if again.DemoAccount != d.app.DemoAccount {
		t.Fatalf("demo account %s after the restart, %s before", again.DemoAccount, d.app.DemoAccount)
	}
	c := testenv.NewClient(t, "http://"+again.Addr(), d.cfg.DemoToken)
	if r := c.Get("/v1/stores"); r.Status != 401 {
		t.Fatalf("revoked demo token after the restart: %d %s", r.Status, r.Body)
	}
	// The demo account is still usable with a token issued for it.
	r := runPodctl(t, bin, env, "token", "issue", "--account", again.DemoAccount.String())
	var issued struct{ Token string }
	if r.err != nil || json.Unmarshal([]byte(r.stdout), &issued) != nil || issued.Token == "" {
		t.Fatalf("token issue: %v %s %s", r.err, r.stdout, r.stderr)
	}
	if r := testenv.NewClient(t, "http://"+again.Addr(), issued.Token).Get("/v1/stores"); r.Status != 200 {
		t.Fatalf("new demo token after the restart: %d %s", r.Status, r.Body)
	}
}

// TestOrderTopicsMadeAgainLoseNoNewOrder: the order commands and events
// topics deleted and made again (a cluster lost, a mistaken delete) start
// new logs below the offsets the order decider, the order projector and
// the fan-out stored for them. After a restart (which makes the topics
// again, as an operator would), a new order is decided, shown and pushed:
// the consumers read the new logs from their start, rather than drop what
// is there as applied before.
func TestOrderTopicsMadeAgainLoseNoNewOrder(t *testing.T) {
	d := startDemo(t, fastPushes)
	ctx := context.Background()
	v := d.variant(t, "ACTIVE", "tshirt")
	commands, events := d.topic(schemas.TopicOrderCommands), d.topic(schemas.TopicOrderEvents)

	// Orders until the decider has applied commands on every partition,
	// so the new order's partition has an offset stored past its new log.
	var before []orderrm.Order
	testenv.Eventually(t, time.Minute, func() error {
		o := create(t, d.client, tshirtOrder(v.VariantID, fmt.Sprintf("before-%d", len(before)), 1))
		before = append(before, o)
		d.waitStatus(t, d.client, o.OrderID, "SUCCESS")
		var used int
		if err := d.app.Pool.QueryRow(ctx, `SELECT count(*) FROM consumer_offsets WHERE consumer = 'order-decider' AND topic = $1 AND next_offset > 0`,
			commands).Scan(&used); err != nil {
			t.Fatal(err)
		}
		if used < d.cfg.KafkaPartitions {
			return fmt.Errorf("commands applied on %d of %d partitions", used, d.cfg.KafkaPartitions)
		}
		return nil
	})

	adm := kadm.NewClient(d.app.Producer)
	// The offsets keep the id of the topic they were stored for, as the
	// broker's fetches carry it: of the decider's offsets on the commands
	// topic, storedFor counts those stored for its id now, and the others.
	storedFor := func(a *app.App) (current, others int) {
		t.Helper()
		listed, err := kadm.NewClient(a.Producer).ListTopics(ctx, commands)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE topic_id = $2), count(*) FILTER (WHERE topic_id IS DISTINCT FROM $2)
			FROM consumer_offsets WHERE consumer = 'order-decider' AND topic = $1 AND next_offset > 0`,
			commands, uuid.UUID(listed[commands].ID)).Scan(&current, &others); err != nil {
			t.Fatal(err)
		}
		return current, others
	}
	if current, others := storedFor(d.app); others > 0 {
		t.Fatalf("%d of the decider's offsets are stored for another topic id than the commands topic's (%d for its own)", others, current)
	}
	deleted, err := adm.DeleteTopics(ctx, commands, events)
	if err == nil {
		err = deleted.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		listed, err := adm.ListTopics(ctx, commands, events)
		if err != nil {
			return err
		}
		for _, td := range listed {
			if td.Err == nil {
				return fmt.Errorf("%s is still there", td.Topic)
			}
		}
		return nil
	})
	d.app.Stop()
	again := podtest.Start(t, d.cfg) // makes the topics again
	d2 := demoEnv{app: again, cfg: d.cfg, client: testenv.NewClient(t, "http://"+again.Addr(), d.cfg.DemoToken), stores: d.stores}

	after := create(t, d2.client, tshirtOrder(v.VariantID, "after", 1))
	d2.waitStatus(t, d2.client, after.OrderID, "SUCCESS")
	// The new order's partition is stored for the new topic; the others
	// move to it with their first records.
	if current, _ := storedFor(again); current == 0 {
		t.Fatal("no offset of the decider is stored for the new commands topic's id")
	}
	for _, o := range before {
		if got := d2.detail(t, d2.client, o.OrderID); got.Status != "SUCCESS" {
			t.Fatalf("order %s made before is %s after the topics were made again", o.OrderID, got.Status)
		}
	}
}
