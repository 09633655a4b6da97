package livetest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/secretbox"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// expectation is what a faulted run must fire: exactly the alerts of
// firing, each with the labels given; alerts of mayPend may also be
// pending (never firing), for the reason given.
type expectation struct {
	firing     map[string]map[string]string
	mayPend    map[string]string
	noCritical bool // the fault is an endpoint's or two: nothing critical may fire
}

// runbookURL is where an alert's runbook_url must point.
func runbookURL(alert string) string {
	return "https://github.com/printpod/pod/blob/main/docs/runbook.md#" + strings.ToLower(alert)
}

// checkNoAlerts requires that no alert was pending or firing at any
// evaluation since from.
func checkNoAlerts(t *testing.T, p *promServer, from time.Time) {
	t.Helper()
	for _, state := range []string{"pending", "firing"} {
		ss, err := p.everActive(state, from)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			t.Errorf("alert %s was %s in a healthy run: %v", s.Labels["alertname"], state, s.Labels)
		}
	}
}

// checkAlerts waits until every alert of exp fires, then requires that
// exactly those fired since from (with their labels), that only they and
// exp.mayPend were ever pending, that each carries its runbook link, and,
// for one endpoint's trouble, that nothing critical fired. It returns the
// report of the alerts that fired.
func checkAlerts(t *testing.T, p *promServer, from time.Time, exp expectation, timeout time.Duration) string {
	t.Helper()
	matches := func(labels, want map[string]string) bool {
		for k, v := range want {
			if labels[k] != v {
				return false
			}
		}
		return true
	}
	var firing []alert
	err := testenv.Poll(timeout, func() error {
		as, err := p.alerts()
		if err != nil {
			return err
		}
		firing = firing[:0]
		var missing []string
		for name, want := range exp.firing {
			found := false
			for _, a := range as {
				if a.State == "firing" && a.Labels["alertname"] == name && matches(a.Labels, want) {
					found = true
					firing = append(firing, a)
				}
			}
			if !found {
				missing = append(missing, fmt.Sprintf("%s%v", name, want))
			}
		}
		if len(missing) > 0 {
			var active []string
			for _, a := range as {
				active = append(active, a.Labels["alertname"]+" "+a.State)
			}
			return fmt.Errorf("not firing yet: %v (active: %v)", missing, active)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	fired, err := p.everActive("firing", from)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, s := range fired {
		name := s.Labels["alertname"]
		want, expected := exp.firing[name]
		switch {
		case !expected:
			t.Errorf("alert %s fired, and is not meant for this fault: %v", name, s.Labels)
		case !matches(s.Labels, want):
			t.Errorf("alert %s fired with labels %v, want %v", name, s.Labels, want)
		}
		if exp.noCritical && s.Labels["severity"] == "critical" {
			t.Errorf("critical alert %s fired for one endpoint's trouble: %v", name, s.Labels)
		}
	}
	pended, err := p.everActive("pending", from)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range pended {
		name := s.Labels["alertname"]
		if _, ok := exp.firing[name]; !ok && exp.mayPend[name] == "" {
			t.Errorf("alert %s was pending, and is not meant for this fault: %v", name, s.Labels)
		}
	}
	runbook := string(readRepoFile(t, "docs", "runbook.md"))
	for _, a := range firing {
		name := a.Labels["alertname"]
		url := a.Annotations["runbook_url"]
		if url != runbookURL(name) {
			t.Errorf("alert %s: runbook_url %q, want %q", name, url, runbookURL(name))
		}
		if !strings.Contains(runbook, "\n### "+name+"\n") {
			t.Errorf("alert %s: docs/runbook.md has no section \"### %s\"", name, name)
		}
		labels := map[string]string{}
		for k, v := range a.Labels {
			if k != "alertname" && k != "severity" {
				labels[k] = v
			}
		}
		lines = append(lines, fmt.Sprintf("  %s (%s) %v: %s\n    runbook %s", name, a.Labels["severity"], labels, a.Annotations["summary"], url))
	}
	for _, s := range pended {
		if why := exp.mayPend[s.Labels["alertname"]]; why != "" {
			lines = append(lines, fmt.Sprintf("  %s pending, not firing: %s", s.Labels["alertname"], why))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// stopConsumer holds, in a transaction of its own, the lock on every
// stored offset of consumer (as a long migration or a stuck session would),
// so each batch it tries waits, times out and is retried: the consumer
// stops making progress while its process runs on. The lock is released
// when the test ends.
func (s *stack) stopConsumer(t *testing.T, consumer string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tx.Rollback(ctx)
		conn.Close(ctx)
	})
	tag, err := tx.Exec(ctx, `SELECT 1 FROM consumer_offsets WHERE consumer = $1 FOR UPDATE`, consumer)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() == 0 {
		t.Fatalf("%s has stored no offset yet: nothing to lock", consumer)
	}
}

// unreadableWebhook registers, for order.created, a webhook whose stored
// secret is then sealed again with a key the service does not have (as
// when a key leaves POD_WEBHOOK_SECRET_KEY too early), so none of its
// deliveries can be signed.
func (s *stack) unreadableWebhook(t *testing.T) {
	t.Helper()
	id := s.registerWebhook(t, "http://"+s.dead+"/unsigned", "livetest: a secret no key opens", []string{schemas.TypeOrderCreated})
	lost, err := secretbox.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := lost.Seal("whsec_livetest")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE webhooks SET secret = $2 WHERE id = $1`, id, sealed); err != nil {
		t.Fatal(err)
	}
}

// plantPoison writes a record no stage can decode straight onto topic, as
// a broken producer outside the API would.
func (s *stack) plantPoison(t *testing.T, topic string) {
	t.Helper()
	addr, err := os.ReadFile(filepath.Join(s.dataDir, "kafka.addr"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.TrimSpace(string(addr))))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := &kgo.Record{Topic: topic, Key: []byte("livetest-poison"), Value: []byte("\x01 this is not JSON")}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// deadWebhook registers, for order.created, a webhook whose endpoint
// refuses every connection, and returns its id.
func (s *stack) deadWebhook(t *testing.T) string {
	t.Helper()
	return s.registerWebhook(t, "http://"+s.dead+"/hook", "livetest: a dead endpoint", []string{schemas.TypeOrderCreated})
}

// flakyFailures is how many attempts at each event the flaky endpoint
// fails before it accepts one.
const flakyFailures = 3

// flakyEndpoint answers 503 to the first flakyFailures requests of each
// event (by its X-Webhook-Id) and 204 to the next.
type flakyEndpoint struct {
	mu       sync.Mutex
	attempts map[string]int
}

func (f *flakyEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Webhook-Id")
	f.mu.Lock()
	f.attempts[id]++
	n := f.attempts[id]
	f.mu.Unlock()
	if n <= flakyFailures {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// delivered is how many events the endpoint accepted.
func (f *flakyEndpoint) delivered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, a := range f.attempts {
		if a > flakyFailures {
			n++
		}
	}
	return n
}

// flakyWebhook starts a flakyEndpoint and registers it as a webhook for
// order.created, and returns it with the webhook's id. With six 1 s
// retries, each delivery to it succeeds at attempt flakyFailures+1, so it
// never fails a delivery and is never disabled. With podbench's webhook
// taking three events an order, its 3 failures of 4 attempts an order hold
// the failure ratio near 3/7, well over the alert's quarter, without the
// delivery log traffic of every topic.
func (s *stack) flakyWebhook(t *testing.T) (*flakyEndpoint, string) {
	t.Helper()
	f := &flakyEndpoint{attempts: map[string]int{}}
	ln, err := net.Listen("tcp", s.flaky)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return f, s.registerWebhook(t, "http://"+s.flaky+"/hook", "livetest: a flaky endpoint", []string{schemas.TypeOrderCreated})
}

// registerWebhook registers a webhook for topics at url and returns its id.
func (s *stack) registerWebhook(t *testing.T, url, description string, topics []string) string {
	t.Helper()
	r := s.api.Do("POST", "/v1/me/webhooks", map[string]any{"url": url, "topics": topics, "description": description})
	if r.Status != 201 {
		t.Fatalf("register %s: %d %s", description, r.Status, r.Body)
	}
	var w struct {
		ID string `json:"id"`
	}
	r.JSON(t, &w)
	return w.ID
}

// topicFulfillmentUpdates is where the poison record goes: the fulfillment
// bridge reads it, and podbench's load never writes to it.
const topicFulfillmentUpdates = schemas.TopicFulfillmentUpdates
