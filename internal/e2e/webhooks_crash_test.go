package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/delivery"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDeliveryCrashMidRetryLosesNothing kills podsvc (SIGKILL) while
// deliveries wait in the retry tiers, restarts it on the same data, and
// checks that every event of every order reaches the endpoint and that the
// delivery log has each delivery once, succeeded.
func TestDeliveryCrashMidRetryLosesNothing(t *testing.T) {
	rc := newReceiver(t)
	// The first two attempts of every event fail; the third succeeds.
	rc.respond = func(_ received, n int) int {
		if n < 2 {
			return 500
		}
		return 200
	}
	p := newPodsvcProc(t, "POD_WEBHOOK_RETRY_DELAYS=1500ms,1500ms,1500ms,1500ms,1500ms,1500ms",
		"POD_WEBHOOK_ALLOW_TARGETS="+rc.addr())
	c := testenv.NewClient(t, "http://"+p.addr, "demo-token")
	w := createWebhook(t, c, rc.url("/crash"))
	rc.setSecret(w.Secret)
	variant := demoTshirt(t, c)

	const orders = 20
	for i := range orders {
		r := c.Do("POST", "/v1/orders/pod", tshirtOrder(variant, fmt.Sprintf("dcrash-%d", i), 1))
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
	}
	// Kill once deliveries are in the tiers: some events had their second
	// attempt, none has succeeded yet everywhere. Every order is pushed
	// first: a push whose call the kill cut is taken over only when its
	// lease ends, and this test is about the deliveries. Twenty creates
	// one after another and their pushes may take most of a minute on a
	// slow real cluster.
	testenv.Eventually(t, 90*time.Second, func() error {
		var pushed struct{ Data []json.RawMessage }
		c.Get("/v1/orders/pod?status=SUCCESS&limit=100").JSON(t, &pushed)
		if len(pushed.Data) < orders {
			return fmt.Errorf("%d of %d orders pushed", len(pushed.Data), orders)
		}
		seconds := 0
		perID := map[string]int{}
		for _, g := range rc.requests() {
			perID[g.ID]++
			if perID[g.ID] == 2 {
				seconds++
			}
		}
		if seconds < 10 {
			return fmt.Errorf("%d events had a second attempt", seconds)
		}
		return nil
	})
	before := len(rc.requests())
	p.kill(t)
	t.Logf("killed after %d requests to the endpoint", before)
	p.start(t)

	pool, err := pgxpool.New(context.Background(), p.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()

	// Every order event on the log, by id.
	events := map[string]string{}
	if err := scanTopic(t, strings.Split(p.brokers(t), ","), p.naming.Topic(schemas.TopicOrderEvents), 60*time.Second, func(r *kgo.Record) bool {
		if ev, err := schemas.ParseEvent(r.Value); err == nil {
			events[ev.ID.String()] = ev.Type
		}
		return len(events) >= orders*3
	}); err != nil {
		t.Fatalf("%d order events on the log, want %d", len(events), orders*3)
	}

	if err := testenv.Poll(60*time.Second, func() error {
		var total, ok int
		if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'success') FROM webhook_deliveries
			WHERE webhook_id = $1`, w.ID).Scan(&total, &ok); err != nil {
			return err
		}
		if total != len(events) || ok != total {
			return fmt.Errorf("%d deliveries, %d succeeded; want %d", total, ok, len(events))
		}
		return nil
	}); err != nil {
		reportUnfinishedDeliveries(t, p, pool, rc, w.ID.String(), events)
		t.Fatalf("within a minute of the restart: %v", err)
	}
	rows, err := pool.Query(ctx, `SELECT event_id::text, attempts, last_status_code FROM webhook_deliveries WHERE webhook_id = $1`, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	logged := map[string]int{} // attempts, by event id
	for rows.Next() {
		var id string
		var attempts, code int
		if err := rows.Scan(&id, &attempts, &code); err != nil {
			t.Fatal(err)
		}
		if _, twice := logged[id]; twice {
			t.Errorf("event %s has two deliveries", id)
		}
		logged[id] = attempts
		if _, ok := events[id]; !ok {
			t.Errorf("delivery of unknown event %s", id)
		}
		if code != 200 {
			t.Errorf("event %s: last status %d", id, code)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	succeeded := map[string]int{}
	for _, g := range rc.requests() {
		if !g.SigOK || !g.StdOK {
			t.Errorf("request for %s not signed correctly", g.ID)
		}
		if g.Status == 200 {
			succeeded[g.ID]++
		}
	}
	// Three attempts, or, for an attempt made just before the kill and made
	// again after it:
	//   - two, when its outcome was not yet recorded;
	//   - four, when its outcome (a failure) and its next attempt were
	//     recorded but it was not yet marked done: made again, it succeeds
	//     this time, and the next attempt, already scheduled, succeeds too.
	//     The endpoint gets the event twice, as delivery at least once
	//     allows; receivers dedupe by event id.
	for id, attempts := range logged {
		if !(attempts == 2 || attempts == 3 || attempts == 4 && succeeded[id] == 2) {
			t.Errorf("event %s: %d attempts, %d of them answered 200", id, attempts, succeeded[id])
		}
	}
	extra := 0
	for id, typ := range events {
		switch n := succeeded[id]; {
		case n == 0:
			t.Errorf("%s %s never reached the endpoint", typ, id)
		case n > 1:
			extra += n - 1
		}
	}
	t.Logf("%d events, %d requests in all (%d before the kill), %d repeated successes", len(events), len(rc.requests()), before, extra)
}

// reportUnfinishedDeliveries logs, for each event of events whose delivery
// to webhook is not logged as succeeded, its log row and the requests the
// endpoint got for it; then every stored stage offset, and the delivery
// topics' end offsets beside the sender group's committed ones (the sender
// keeps its progress in Kafka, the stages theirs in Postgres).
func reportUnfinishedDeliveries(t *testing.T, p *podsvcProc, pool *pgxpool.Pool, rc *receiver, webhook string, events map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Logf("now: %v", err)
	}
	t.Logf("report at %s", now.UTC().Format("15:04:05.000"))
	byID := map[string][]received{}
	for _, g := range rc.requests() {
		byID[g.ID] = append(byID[g.ID], g)
	}
	ids := make([]string, 0, len(events))
	for id := range events {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		var status, row string
		err := pool.QueryRow(ctx, `SELECT status, format('attempts %s, run %s, run_attempt %s, last code %s, last error %s, next retry %s, created %s, updated %s',
			attempts, run, run_attempt, last_status_code, last_error, next_retry_at, created_at, updated_at)
			FROM webhook_deliveries WHERE webhook_id = $1 AND event_id = $2`, webhook, id).Scan(&status, &row)
		if err == nil && status == "success" {
			continue
		}
		var reqs []string
		for _, g := range byID[id] {
			reqs = append(reqs, fmt.Sprintf("%s → %d", g.At.UTC().Format("15:04:05.000"), g.Status))
		}
		t.Logf("unfinished: event %s (%s): log row %s %s (%v); endpoint requests: %v", id, events[id], status, row, err, reqs)
	}
	rows, err := pool.Query(ctx, `SELECT consumer, topic, partition, next_offset, updated_at FROM consumer_offsets ORDER BY 1, 2, 3`)
	if err != nil {
		t.Logf("stored offsets: %v", err)
		return
	}
	var consumer, topic string
	var partition int
	var next int64
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&consumer, &topic, &partition, &next, &at}, func() error {
		t.Logf("stored offset: %s %s/%d next %d (updated %s)", consumer, topic, partition, next, at.UTC().Format("15:04:05.000"))
		return nil
	})
	if err != nil {
		t.Logf("stored offsets: %v", err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(p.brokers(t), ",")...))
	if err != nil {
		t.Logf("kafka client: %v", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := append([]string{p.naming.Topic(schemas.TopicWebhookDeliveries), p.naming.Topic(schemas.TopicWebhookAttempts)}, p.naming.RetryTiers()...)
	ends, committed, err := groupProgress(ctx, adm, p.naming.Group(delivery.SenderGroup), topics)
	if err != nil {
		t.Logf("delivery topics' offsets: %v", err)
		return
	}
	for _, tp := range topics {
		var parts []string
		for part, end := range ends[tp] {
			c := "none"
			if o, ok := committed.Lookup(tp, part); ok {
				c = fmt.Sprint(o.At)
			}
			parts = append(parts, fmt.Sprintf("%d: end %d, sender committed %s", part, end.Offset, c))
		}
		sort.Strings(parts)
		t.Logf("topic %s: %s", tp, strings.Join(parts, "; "))
	}
}
