package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/internal/wait"
)

func TestRank(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ p, want float64 }{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}} {
		if got := rank(v, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if s := summarize(nil); s.N != 0 {
		t.Errorf("empty summary: %+v", s)
	}
}

func TestLedgerReferences(t *testing.T) {
	l := newLedger("abcd")
	for range chunkSize + 3 {
		l.add()
	}
	n := 0
	l.each(func(o *order) {
		if o.seq != n {
			t.Fatalf("entry %d has seq %d", n, o.seq)
		}
		if seq, ok := l.seqOf(o.ref); !ok || seq != n {
			t.Fatalf("seqOf(%q) = %d, %v", o.ref, seq, ok)
		}
		n++
	})
	if n != chunkSize+3 {
		t.Fatalf("each saw %d entries", n)
	}
	for _, ref := range []string{"pb-other-1", "pb-abcd-", "pb-abcd-x", "SHOP-1"} {
		if _, ok := l.seqOf(ref); ok {
			t.Errorf("seqOf(%q) claims the reference", ref)
		}
	}
}

func TestValidSignature(t *testing.T) {
	secret, ts, body := "whsec_abc", "1795252800", []byte(`{"id":"x"}`)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + string(body)))
	sig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	if !validSignature(secret, ts, body, sig) {
		t.Fatal("a correct signature was refused")
	}
	if validSignature(secret, ts, []byte(`{"id":"y"}`), sig) || validSignature("whsec_other", ts, body, sig) ||
		validSignature(secret, "1795252801", body, sig) {
		t.Fatal("a wrong signature was accepted")
	}
}

func TestParseLag(t *testing.T) {
	text := `# HELP pod_consumer_lag Records not yet committed.
# TYPE pod_consumer_lag gauge
pod_consumer_lag{group="projections.orders",partition="0",topic="pod.order.events"} 3
pod_consumer_lag{group="projections.orders",partition="1",topic="pod.order.events"} 4
pod_consumer_lag{group="delivery.sender",partition="0",topic="pod.webhook.deliveries"} 1e+01
pod_consumer_lag_seconds{group="projections.orders"} 99
pod_topic_end_offset{partition="0",topic="pod.order.events"} 1000
`
	sums, found := parseLag(strings.NewReader(text))
	if !found || sums["projections.orders"] != 7 || sums["delivery.sender"] != 10 || len(sums) != 2 {
		t.Fatalf("parseLag = %v, %v", sums, found)
	}
	if _, found := parseLag(strings.NewReader("pod_other 1\n")); found {
		t.Fatal("found lag where there is none")
	}
}

// TestCheckClassifiesRepeats: an event repeated with no kill between is a
// duplicate; one the killed podsvc delivered (before the kill, or in flight
// at it) and another process delivered again after the kill is a
// redelivery after the crash.
func TestCheckClassifiesRepeats(t *testing.T) {
	led := newLedger("r")
	o := led.add()
	o.outcome, o.orderID = accepted, "11111111-1111-1111-1111-111111111111"
	lost := led.add()
	lost.outcome, lost.orderID = accepted, "22222222-2222-2222-2222-222222222222"
	rcv := newReceiver(led)
	t0 := time.Now()
	env := func(id, topic string) envelope {
		var e envelope
		e.ID, e.Topic = id, topic
		e.Data.Order.ID, e.Data.Order.ReferenceID = o.orderID, o.ref
		return e
	}
	rcv.record(env("e1", "order.created"), t0)
	rcv.record(env("e1", "order.created"), t0.Add(time.Second)) // again, no crash in between
	crash := crashSpan{kill: t0.Add(2 * time.Second), resume: t0.Add(2500 * time.Millisecond)}
	rcv.record(env("e2", "order.status_updated"), t0)
	rcv.record(env("e2", "order.status_updated"), t0.Add(3*time.Second)) // again, across the crash
	rcv.record(env("e3", "order.status_updated"), crash.kill.Add(10*time.Millisecond))
	rcv.record(env("e3", "order.status_updated"), t0.Add(3*time.Second)) // in flight at the kill, again after the restart
	rcv.record(env("e4", "order.status_updated"), t0.Add(time.Second))
	rcv.record(env("e4", "order.status_updated"), t0.Add(1500*time.Millisecond)) // twice before the kill
	present := map[string]bool{o.orderID: true}
	v := check(led, rcv, present, "created", []crashSpan{crash})
	if v.Accepted != 2 || v.Lost != 1 || v.MissingFromReadModel != 1 || v.MissingCreatedWebhook != 1 {
		t.Errorf("loss: %+v", v)
	}
	if v.Duplicated != 2 || v.DuplicateDeliveries != 2 || v.RedeliveredAfterCrash != 2 || v.RedeliveredWindowMs != 2000 {
		t.Errorf("repeats: %+v", v)
	}
}

// TestAStalledDrainNamesTheOrdersItWaitsFor: the orders drain names are
// the ones still waiting, each with what it lacks (order.created, or the
// push's status update), and an order answered 503 "recorded" by its
// reference.
func TestAStalledDrainNamesTheOrdersItWaitsFor(t *testing.T) {
	led := newLedger("r")
	none := led.add()
	none.outcome, none.orderID = accepted, "11111111-1111-1111-1111-111111111111"
	unpushed := led.add()
	unpushed.outcome, unpushed.orderID = accepted, "22222222-2222-2222-2222-222222222222"
	recorded := led.add()
	recorded.outcome, recorded.recorded = rejected, true
	done := led.add()
	done.outcome, done.orderID = accepted, "33333333-3333-3333-3333-333333333333"
	rcv := newReceiver(led)
	now := time.Now()
	rcv.orders[unpushed.seq] = &orderSeen{orderID: unpushed.orderID, created: now}
	rcv.orders[done.seq] = &orderSeen{orderID: done.orderID, created: now, terminal: now}
	var stuck []*order
	led.each(func(o *order) {
		if waiting(o, rcv, "pushed") {
			stuck = append(stuck, o)
		}
	})
	var out bytes.Buffer
	nameStuck(&out, stuck, rcv, len(stuck), 6*time.Second)
	got := out.String()
	for _, want := range []string{
		"3 orders got no expected webhook for 6s",
		"order " + none.orderID + " sent",
		none.orderID + " sent 00:00:00.000 lacks order.created",
		"order " + unpushed.orderID + " sent 00:00:00.000 lacks a SUCCESS or FAILED status update",
		"order (answered 503, reference " + recorded.ref + ") sent",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the drain's names lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, done.orderID) {
		t.Errorf("the drain names an order whose webhooks all came:\n%s", got)
	}
}

func TestProcessGroupCountsOnlyTheServicesProcesses(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    procInfo
		want string
	}{
		{"the postmaster counts", procInfo{"postgres", "/usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql/15/main"}, cpuPostgres},
		{"a backend of the service's database counts", procInfo{"postgres", "postgres: postgres podbench_1a2b 127.0.0.1(51234) idle"}, cpuPostgres},
		{"a socket backend of the service's database counts", procInfo{"postgres", "postgres: postgres podbench_1a2b [local] SELECT"}, cpuPostgres},
		{"a backend of another database does not", procInfo{"postgres", "postgres: postgres other_db 127.0.0.1(51234) idle in transaction"}, ""},
		{"the checkpointer counts", procInfo{"postgres", "postgres: checkpointer"}, cpuPostgres},
		{"the WAL writer counts", procInfo{"postgres", "postgres: walwriter"}, cpuPostgres},
		{"an autovacuum worker of the database counts", procInfo{"postgres", "postgres: autovacuum worker podbench_1a2b"}, cpuPostgres},
		{"an autovacuum worker of another database does not", procInfo{"postgres", "postgres: autovacuum worker other_db"}, ""},
		{"redis counts", procInfo{"redis-server", "redis-server 127.0.0.1:6379"}, cpuRedis},
		{"a Kafka node is the kafka group", procInfo{"java", "java -Xmx512m -cp libs/* kafka.Kafka /x/server.properties"}, cpuKafka},
		{"another JVM is nothing", procInfo{"java", "java -cp libs/* org.apache.kafka.tools.TopicCommand --list"}, ""},
		{"a shell is nothing", procInfo{"bash", "bash -c true"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := processGroup(tc.p, "podbench_1a2b"); got != tc.want {
				t.Fatalf("processGroup(%q) = %q, want %q", tc.p.cmdline, got, tc.want)
			}
		})
	}
}

func TestBodiesFromTheTemplateAreTheBodiesEncodedAfresh(t *testing.T) {
	for _, v := range []variant{
		{VariantID: "9d83c1e5-f5ab-5199-9843-2852374394f4", SKU: "TS-OVR-WAS-M", Category: "tshirt"},
		{VariantID: "0b8f6f0e-43d3-5d7e-a3c6-0d0b1f3f7a11", SKU: "CAP-EMB", Category: "cap", Yarn: []string{"cotton"}},
	} {
		body := v.bodies()
		for _, ref := range []string{"pb-1a2b3c4d-0", "pb-1a2b3c4d-123456", `needs "escaping"`, "<html>"} {
			if got, want := body(ref), v.body(ref); !bytes.Equal(got, want) {
				t.Errorf("%s, %q:\n got %s\nwant %s", v.Category, ref, got, want)
			}
		}
	}
}

func TestAPostToAPortNobodyListensOnIsRefusedAndAHangUpIsNoAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	a := &api{base: "http://" + closed, token: "t", hc: newHTTPClient(4, 2*time.Second)}
	if _, _, err := a.do(context.Background(), "POST", "/v1/orders/pod", []byte(`{}`)); err == nil || classify(err) != refused {
		t.Errorf("closed port: %v, classified %v; want refused", err, classify(err))
	}

	hangUp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hangUp.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := hangUp.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_, _ = c.Read(make([]byte, 4096))
			c.Close()
		}
	}()
	a.base = "http://" + hangUp.Addr().String()
	if _, _, err := a.do(context.Background(), "POST", "/v1/orders/pod", []byte(`{}`)); err == nil || classify(err) != noAnswer {
		t.Errorf("hang-up: %v; want no answer", err)
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("the POST reached the server %d times; a POST must never be sent twice", n)
	}
}

// TestTheCostMeterCountsTheWALOfRowsWritten: rows written on another
// connection show in the server's WAL counters as podbench reads them.
func TestTheCostMeterCountsTheWALOfRowsWritten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := testenv.NewDatabase(t)
	before, err := readPgCounts(ctx, url)
	if err != nil || !before.WAL {
		t.Fatalf("counters %+v, %v; want the WAL read", before, err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `CREATE TABLE walcheck (n int)`)
	if err == nil {
		_, err = conn.Exec(ctx, `INSERT INTO walcheck SELECT generate_series(1, 1000)`)
	}
	conn.Close(ctx) // a backend reports its WAL counters at the latest when it ends
	if err != nil {
		t.Fatal(err)
	}
	var after pgCounts
	err = wait.Until(ctx, (<-chan struct{})(nil), 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		after, err = readPgCounts(ctx, url)
		return err == nil && after.WALRecords >= before.WALRecords+1000, err
	})
	if err != nil {
		t.Fatalf("WAL records %d before, %d after 1,000 rows (%v); want at least 1,000 more", before.WALRecords, after.WALRecords, err)
	}
	if after.WALBytes <= before.WALBytes {
		t.Fatalf("WAL bytes %d before, %d after", before.WALBytes, after.WALBytes)
	}
}
