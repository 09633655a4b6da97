package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
	catalogrm "github.com/printpod/pod/projections/catalog"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// podsvcProc is podsvc run as a separate process, so it can be killed.
type podsvcProc struct {
	naming schemas.Naming // the topic and group prefixes on a real cluster
	dir    string
	dbURL  string
	bin    string
	env    []string
	addr   string
	cmd    *exec.Cmd
	log    *os.File
}

func (p *podsvcProc) start(t *testing.T) {
	t.Helper()
	p.cmd = exec.Command(p.bin)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := testenv.NewClient(t, "http://"+p.addr, "demo-token")
	c.HTTP.Timeout = 2 * time.Second
	testenv.Eventually(t, 60*time.Second, func() error {
		resp, err := c.HTTP.Get("http://" + p.addr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
}

// brokers is the real cluster's, or the embedded broker's address as the
// process wrote it.
func (p *podsvcProc) brokers(t *testing.T) string {
	t.Helper()
	if real := podtest.RealKafka(); real != nil {
		return strings.Join(real, ",")
	}
	b, err := os.ReadFile(filepath.Join(p.dir, "var", "kafka.addr"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func (p *podsvcProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// stop shuts the process down as an operator would (SIGTERM), so its
// consumers leave their groups and the test's groups can be deleted from a
// shared cluster; it is killed if it has not exited within 30 s.
func (p *podsvcProc) stop(t *testing.T) {
	t.Helper()
	exited := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(exited)
	}()
	if podtest.Terminate(p.cmd.Process, exited, 30*time.Second) {
		t.Logf("podsvc did not exit within 30 s of SIGTERM; killed it")
	}
}

// newPodsvcProc builds podsvc (once per test binary run) and starts it as a
// process on a fresh database, data directory and Redis prefix, in
// development with the demo data; env adds or overrides settings. The
// process is stopped (SIGTERM) when the test ends, and its log tail is
// shown when the test failed.
func newPodsvcProc(t *testing.T, env ...string) *podsvcProc {
	t.Helper()
	bin := podsvcBinary.Build(t, binDir)
	dir := t.TempDir()
	dbURL := testenv.NewDatabase(t)
	logf, err := os.Create(filepath.Join(dir, "podsvc.log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &podsvcProc{bin: bin, addr: testenv.FreeAddr(t), log: logf, dbURL: dbURL, dir: dir}
	kafka := []string{"KAFKA_BROKERS="}
	if real := podtest.RealKafka(); real != nil {
		prefix := "t" + testenv.RandomSuffix() + "."
		p.naming = schemas.Naming{TopicPrefix: prefix, GroupPrefix: prefix}
		kafka = []string{"KAFKA_BROKERS=" + strings.Join(real, ","), "POD_KAFKA_TOPIC_PREFIX=" + prefix, "POD_KAFKA_GROUP_PREFIX=" + prefix}
		t.Cleanup(func() { podtest.DropPrefixed(t, real, prefix) }) // after the process is killed
	}
	p.env = append([]string{"DATABASE_URL=" + dbURL, "REDIS_URL=" + testenv.RedisURL(), "POD_DATA_DIR=" + filepath.Join(dir, "var"),
		"POD_HTTP_ADDR=" + p.addr, "POD_KAFKA_PARTITIONS=3", "POD_REDIS_PREFIX=podcrash:" + testenv.RandomSuffix() + ":",
		"POD_PUSH_RETRY_DELAYS=100ms,100ms,100ms", "POD_DEMO_TOKEN=demo-token", "POD_LOG_LEVEL=info",
		"POD_ENV=development"}, append(kafka, env...)...)
	p.start(t)
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.stop(t)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("podsvc log tail:\n%s", b)
		}
		logf.Close()
	})
	return p
}

// demoTshirt waits until the demo catalog is projected and returns an
// ACTIVE t-shirt variant of the ACTIVE demo store.
func demoTshirt(t *testing.T, c *testenv.Client) uuid.UUID {
	t.Helper()
	var variant uuid.UUID
	testenv.Eventually(t, 60*time.Second, func() error {
		var stores struct{ Data []catalogrm.Store }
		c.Get("/v1/stores").JSON(t, &stores)
		for _, s := range stores.Data {
			if s.Status != "ACTIVE" {
				continue
			}
			var pp struct{ Data []catalogrm.Product }
			c.Get("/v1/stores/"+s.StoreID.String()+"/products?q=tee&limit=100").JSON(t, &pp)
			for _, pr := range pp.Data {
				for _, v := range pr.Variants {
					if v.Category == "tshirt" && pr.Status == "ACTIVE" {
						variant = v.VariantID
						return nil
					}
				}
			}
		}
		return fmt.Errorf("demo catalog not projected yet")
	})
	return variant
}

// TestCrashMidBatchLosesNothing kills podsvc (SIGKILL, embedded broker on
// disk) while a 400-order batch and a stream of single creates are being
// decided, restarts it on the same data, and checks that every accepted
// order exists exactly once with its complete event history.
func TestCrashMidBatchLosesNothing(t *testing.T) {
	p := newPodsvcProc(t)
	c := testenv.NewClient(t, "http://"+p.addr, "demo-token")
	variant := demoTshirt(t, c)

	const batchSize = 400
	orders := make([]map[string]any, batchSize)
	for i := range orders {
		orders[i] = tshirtOrder(variant, fmt.Sprintf("crash-b-%d", i), 1+i%5)
	}
	r := c.Do("POST", "/v1/orders/pod/batches", map[string]any{"orders": orders})
	if r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	var batch struct {
		BatchID uuid.UUID `json:"batch_id"`
	}
	r.JSON(t, &batch)

	// Single creates race the kill; every 201 must survive it.
	var accepted sync.Map
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := testenv.NewClient(t, "http://"+p.addr, "demo-token")
			for i := 0; !stop.Load(); i++ {
				ref := fmt.Sprintf("crash-s-%d-%d", w, i)
				raw, _ := json.Marshal(tshirtOrder(variant, ref, 1))
				res, err := postJSON(cl, "/v1/orders/pod", raw)
				if err != nil {
					return // the process is gone
				}
				if res == 201 {
					accepted.Store(ref, true)
				}
			}
		}()
	}
	// Kill once part of the batch is decided.
	testenv.Eventually(t, 60*time.Second, func() error {
		var st struct{ Processed int }
		c.Get("/v1/orders/pod/batches/"+batch.BatchID.String()).JSON(t, &st)
		if st.Processed < batchSize/4 {
			return fmt.Errorf("%d processed", st.Processed)
		}
		return nil
	})
	p.kill(t)
	stop.Store(true)
	wg.Wait()

	pool, err := pgxpool.New(context.Background(), p.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	// The runs the killed process held come due when their lease (two
	// minutes) ends: the test lets that time pass now, before the restart,
	// while no process holds a lease.
	if _, err := pool.Exec(ctx, `UPDATE jobs SET due_at = now() WHERE queue = 'batch'`); err != nil {
		t.Fatal(err)
	}
	p.start(t)
	var st struct {
		Status    string
		Processed int
		Succeeded int
		Items     []struct {
			Index      int
			Status     string
			OrderID    *uuid.UUID      `json:"order_id"`
			Error      json.RawMessage `json:"error"`
			HTTPStatus *int            `json:"http_status"`
		}
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		c.Get("/v1/orders/pod/batches/"+batch.BatchID.String()).JSON(t, &st)
		if st.Status != "completed" {
			return fmt.Errorf("batch %s, %d/%d processed", st.Status, st.Processed, batchSize)
		}
		return nil
	})
	if st.Succeeded != batchSize {
		for _, it := range st.Items {
			if it.Status != "created" {
				t.Errorf("batch item %d: %s %s", it.Index, it.Status, it.Error)
			}
		}
		t.Fatalf("%d of %d batch orders created", st.Succeeded, batchSize)
	}

	// Every accepted order exists exactly once, in the decider, the read
	// model and the event log.
	nAccepted := 0
	accepted.Range(func(_, _ any) bool { nAccepted++; return true })
	var decided, projected, distinctRefs int
	testenv.Eventually(t, 60*time.Second, func() error {
		// A create left undecided by the kill is decided after the restart.
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM order_state`).Scan(&decided)
		_ = pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT reference_id) FROM orders`).Scan(&projected, &distinctRefs)
		if projected != decided {
			return fmt.Errorf("%d projected of %d decided", projected, decided)
		}
		return nil
	})
	if projected != distinctRefs {
		t.Fatalf("%d orders for %d references", projected, distinctRefs)
	}
	accepted.Range(func(k, _ any) bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE reference_id = $1`, k).Scan(&n)
		if n != 1 {
			t.Errorf("accepted order %s: %d rows", k, n)
		}
		return true
	})
	var batchOrders int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE reference_id LIKE 'crash-b-%'`).Scan(&batchOrders)
	if batchOrders != batchSize {
		t.Fatalf("%d batch orders in the read model", batchOrders)
	}

	// The event log: per order, one order.created id and versions 1..v
	// without a gap, v being the decider's version.
	brokers := p.brokers(t)
	versions := map[string]map[int]uuid.UUID{}
	created := map[string]map[uuid.UUID]bool{}
	// A snapshot of the decider's versions; pushes go on meanwhile, so the
	// log is read until it holds at least these.
	want := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT order_id::text, version FROM order_state`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var v int
		_ = rows.Scan(&id, &v)
		want[id] = v
	}
	rows.Close()
	missing := func() (string, int) {
		for id, v := range want {
			for i := 1; i <= v; i++ {
				if _, ok := versions[id][i]; !ok {
					return id, i
				}
			}
		}
		return "", 0
	}
	got := 0
	err = scanTopic(t, strings.Split(brokers, ","), p.naming.Topic(schemas.TopicOrderEvents), 60*time.Second, func(rec *kgo.Record) bool {
		ev, err := schemas.ParseEvent(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		if err := schemas.ValidateEvent(rec.Value); err != nil {
			t.Errorf("event %s %s does not match its schema: %v", ev.Type, ev.ID, err)
		}
		v := schemas.OrderVersion(rec.Headers)
		k := string(rec.Key)
		if versions[k] == nil {
			versions[k] = map[int]uuid.UUID{}
			created[k] = map[uuid.UUID]bool{}
		}
		if prev, ok := versions[k][v]; ok {
			if prev != ev.ID {
				t.Errorf("order %s version %d: two different events %s and %s", k, v, prev, ev.ID)
			}
			return false // republished with the same id: at-least-once
		}
		versions[k][v] = ev.ID
		got++
		if ev.Type == schemas.TypeOrderCreated {
			created[k][ev.ID] = true
		}
		id, _ := missing()
		return id == ""
	})
	if err != nil {
		id, v := missing()
		t.Fatalf("order %s: event version %d missing from the log", id, v)
	}
	for id := range want {
		if len(created[id]) != 1 {
			t.Errorf("order %s: %d distinct order.created events", id, len(created[id]))
		}
	}
	var page struct{ Data []orderrm.Order }
	c.Get("/v1/orders/pod?limit=1").JSON(t, &page)
	t.Logf("killed mid-batch: %d batch orders + %d single creates accepted (201); after restart %d orders decided, %d projected, %d distinct events, none lost or duplicated",
		batchSize, nAccepted, decided, projected, got)
}

// postJSON posts raw and returns the status; err when the service is gone.
func postJSON(c *testenv.Client, path string, raw []byte) (int, error) {
	req, err := newJSONRequest(c, path, raw)
	if err != nil {
		return 0, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}
