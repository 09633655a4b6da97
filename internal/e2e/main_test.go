// Package e2e tests podsvc end to end: the real binary's assembly in-process,
// over HTTP, against the machine's Postgres and Redis and the embedded
// Kafka-protocol broker.
package e2e

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/accounts"
	"github.com/printpod/pod/internal/app"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/testenv"
	catalogrm "github.com/printpod/pod/projections/catalog"
)

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

// waitDemoCatalog waits until the projector applied the demo catalog this
// start published (if any), then reads the demo stores.
func waitDemoCatalog(t testing.TB, d *demoEnv) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := catalogrm.WaitProjected(ctx, d.app.Pool, d.app.DemoOffsets); err != nil {
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

func q(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return "?" + v.Encode()
}
