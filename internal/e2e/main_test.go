// Package e2e tests podsvc end to end: the real binary's assembly in-process,
// over HTTP, against the machine's Postgres and Redis and the embedded
// Kafka-protocol broker.
package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/cmd/podsvc/app"
	"github.com/printpod/pod/internal/accounts"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
	catalogrm "github.com/printpod/pod/projections/catalog"
	"github.com/twmb/franz-go/pkg/kadm"
)

// binDir holds the binaries the tests build (once per test binary run); it
// is removed when the tests end.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pod-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var (
	podsvcBinary = &podtest.Binary{Pkg: "github.com/printpod/pod/cmd/podsvc"}
	podctlBinary = &podtest.Binary{Pkg: "github.com/printpod/pod/cmd/podctl"}
)

// waitsMostly marks a test that spends most of its time waiting on the
// service's own clocks (a create's 10 s wait, a slow receiver, a batch
// run's retry delay, a stalled stage) or on Postgres, not on this
// process's CPU. Such tests run beside one another once the rest of the
// package has run (go test's -parallel bounds how many at once): each has
// a podsvc, a database, a Redis prefix and topics of its own.
func waitsMostly(t *testing.T) { t.Parallel() }

// demoEnv is a running podsvc with the demo catalog projected.
type demoEnv struct {
	app    *app.App
	cfg    config.Config
	client *testenv.Client
	stores []catalogrm.Store
}

func (d demoEnv) store(t testing.TB, status string) catalogrm.Store {
	t.Helper()
	for _, s := range d.stores {
		if s.Status == status {
			return s
		}
	}
	t.Fatalf("no demo store with status %s", status)
	return catalogrm.Store{}
}

// newAccount creates an account through the service's own store and returns
// its id and first token.
func (d demoEnv) newAccount(t *testing.T, name string) (uuid.UUID, string) {
	t.Helper()
	id, token, err := accounts.Store{Pool: d.app.Pool}.Create(context.Background(), name)
	if err != nil {
		t.Fatalf("create account %s: %v", name, err)
	}
	return id, token
}

func startDemo(t testing.TB, adjust ...func(*config.Config)) demoEnv {
	t.Helper()
	cfg := podtest.Config(t)
	for _, f := range adjust {
		f(&cfg)
	}
	a := podtest.Start(t, cfg)
	c := testenv.NewClient(t, "http://"+a.Addr(), cfg.DemoToken)
	d := demoEnv{app: a, cfg: cfg, client: c}
	waitDemoCatalog(t, &d)
	return d
}

// startPeer starts a second podsvc on the same database and broker as d,
// on a free port with its own data directory, adjusted by adjust, and
// returns it with a client of the demo account.
func (d demoEnv) startPeer(t testing.TB, adjust ...func(*config.Config)) (*app.App, *testenv.Client) {
	t.Helper()
	a := podtest.Start(t, d.peerConfig(t, adjust...))
	return a, testenv.NewClient(t, "http://"+a.Addr(), d.cfg.DemoToken)
}

// waitJoined waits until each consumer's group is stable with n members,
// each of them assigned partitions: a burst sent right after a peer starts
// would otherwise meet the rebalance its joining makes (on a real cluster,
// seconds of it, in two rounds: the first leaves the new member nothing).
func (d demoEnv) waitJoined(t testing.TB, n int, consumers ...string) {
	t.Helper()
	adm := kadm.NewClient(d.app.Producer)
	groups := make([]string, len(consumers))
	for i, c := range consumers {
		groups[i] = d.app.Naming.Group(c)
	}
	testenv.Eventually(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		described, err := adm.DescribeGroups(ctx, groups...)
		if err != nil {
			return err
		}
		for _, g := range described.Sorted() {
			if g.Err != nil {
				return fmt.Errorf("group %s: %w", g.Group, g.Err)
			}
			if g.State != "Stable" || len(g.Members) != n {
				return fmt.Errorf("group %s is %s with %d members, want Stable with %d", g.Group, g.State, len(g.Members), n)
			}
			for _, m := range g.Members {
				if c, ok := m.Assigned.AsConsumer(); !ok || len(c.Topics) == 0 {
					return fmt.Errorf("group %s: member %s has no partitions yet", g.Group, m.ClientID)
				}
			}
		}
		return nil
	})
}

// peerConfig is the configuration startPeer starts a second podsvc with.
func (d demoEnv) peerConfig(t testing.TB, adjust ...func(*config.Config)) config.Config {
	cfg := d.cfg
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.KafkaBrokers = d.app.Brokers
	cfg.DataDir = t.TempDir()
	for _, f := range adjust {
		f(&cfg)
	}
	return cfg
}

// waitDemoCatalog waits until the projector applied the demo catalog this
// start published (if any), then reads the demo stores.
func waitDemoCatalog(t testing.TB, d *demoEnv) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := catalogrm.WaitProjected(ctx, d.app.Pool, d.app.Naming, d.app.DemoOffsets); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		var page struct{ Data []catalogrm.Store }
		r := d.client.Get("/v1/stores")
		if r.Status != 200 {
			return testenv.Errorf("stores: %d %s", r.Status, r.Body)
		}
		r.JSON(t, &page)
		if len(page.Data) != 2 {
			return testenv.Errorf("%d demo stores so far", len(page.Data))
		}
		for _, s := range page.Data {
			var pp struct{ Data []catalogrm.Product }
			d.client.Get("/v1/stores/"+s.StoreID.String()+"/products?limit=100").JSON(t, &pp)
			if len(pp.Data) == 0 {
				return testenv.Errorf("store %s has no products yet", s.Name)
			}
		}
		d.stores = page.Data
		return nil
	})
}

// topic is the name of a logical topic on the broker the test runs on (the
// real cluster's carry the test's prefix).
func (d demoEnv) topic(logical string) string { return d.cfg.Naming().Topic(logical) }

// podctlEnv is the environment podctl needs to reach this service's
// database and broker, with the same topic and group prefixes.
func (d demoEnv) podctlEnv() []string {
	return []string{"DATABASE_URL=" + d.cfg.DatabaseURL, "POD_DATA_DIR=" + d.cfg.DataDir,
		"KAFKA_BROKERS=" + strings.Join(d.cfg.KafkaBrokers, ","),
		"POD_KAFKA_TOPIC_PREFIX=" + d.cfg.KafkaTopicPrefix, "POD_KAFKA_GROUP_PREFIX=" + d.cfg.KafkaGroupPrefix}
}

func q(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return "?" + v.Encode()
}
