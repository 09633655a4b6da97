package catalog

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTheCatalogIsTheSameHoweverItsEventsAreBatched applies histories of
// catalog events one event a batch, then, on fresh ids, as one batch and
// split in two, and checks that every way leaves the same rows: the
// projector's batch at once means what its events one by one mean. (A
// batch redone after a crash starts from the rows before it: its first
// run rolled back.)
func TestTheCatalogIsTheSameHoweverItsEventsAreBatched(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	handle := Projector(schemas.Naming{}, slog.New(slog.DiscardHandler)).Handle
	apply := func(recs []*kgo.Record) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := handle(ctx, tx, recs)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A stranger's store, made once, that the histories' products claim.
	stranger := uuid.New()
	strangersStore := uuid.New()
	apply([]*kgo.Record{storeEvent(t, stranger, strangersStore, "Not yours", "ACTIVE")})

	histories := map[string]struct {
		events func(account uuid.UUID, ids *catalogIDs) []*kgo.Record
		// what the rows must show, one event a batch
		stores, products, variants int
	}{
		"a store, a product with three variants, the product again with one changed and one gone": {
			func(a uuid.UUID, id *catalogIDs) []*kgo.Record {
				return []*kgo.Record{
					storeEvent(t, a, id.store, "Shop", "ACTIVE"),
					productEvent(t, a, id.store, id.product, "Tee", id.variant(0, "10.00"), id.variant(1, "11.00"), id.variant(2, "12.00")),
					productEvent(t, a, id.store, id.product, "Tee v2", id.variant(0, "10.50"), id.variant(2, "12.00")),
				}
			}, 1, 1, 2,
		},
		"a product emptied of its variants, alone in its batch": {
			func(a uuid.UUID, id *catalogIDs) []*kgo.Record {
				return []*kgo.Record{
					storeEvent(t, a, id.store, "Shop", "ACTIVE"),
					productEvent(t, a, id.store, id.product, "Tee", id.variant(0, "10.00"), id.variant(1, "11.00")),
					productEvent(t, a, id.store, id.product, "Tee, retired"),
				}
			}, 1, 1, 0,
		},
		"a store renamed and paused between its products": {
			func(a uuid.UUID, id *catalogIDs) []*kgo.Record {
				return []*kgo.Record{
					storeEvent(t, a, id.store, "Shop", "ACTIVE"),
					productEvent(t, a, id.store, id.product, "Cap", id.variant(0, "8.00")),
					storeEvent(t, a, id.store, "Shop & Co", "INACTIVE"),
					productEvent(t, a, id.store, id.other, "Tote", id.variant(1, "9.00"), id.variant(2, "9.50")),
				}
			}, 1, 2, 3,
		},
		"a product before its store is not applied, and after it is": {
			func(a uuid.UUID, id *catalogIDs) []*kgo.Record {
				return []*kgo.Record{
					productEvent(t, a, id.store, id.product, "Early", id.variant(0, "5.00")),
					storeEvent(t, a, id.store, "Shop", "ACTIVE"),
					productEvent(t, a, id.store, id.other, "On time", id.variant(1, "6.00")),
				}
			}, 1, 1, 1,
		},
		"a store claimed by another account, and a product in a stranger's store, are not applied": {
			func(a uuid.UUID, id *catalogIDs) []*kgo.Record {
				return []*kgo.Record{
					storeEvent(t, a, id.store, "Mine", "ACTIVE"),
					storeEvent(t, uuid.New(), id.store, "Taken over", "ACTIVE"),
					productEvent(t, a, strangersStore, id.product, "Squatter", id.variant(0, "1.00")),
					productEvent(t, a, id.store, id.other, "Hoodie", id.variant(1, "30.00")),
				}
			}, 1, 1, 1,
		},
	}
	for name, h := range histories {
		account := uuid.New()
		for _, r := range h.events(account, newCatalogIDs()) {
			apply([]*kgo.Record{r})
		}
		want := snapshot(t, pool, account)
		if want.stores != h.stores || want.products != h.products || want.variants != h.variants {
			t.Errorf("%s, one event a batch: %d stores, %d products, %d variants; want %d, %d, %d",
				name, want.stores, want.products, want.variants, h.stores, h.products, h.variants)
		}
		splits := map[string]func([]*kgo.Record) [][]*kgo.Record{
			"one batch":                    func(rs []*kgo.Record) [][]*kgo.Record { return [][]*kgo.Record{rs} },
			"the first two, then the rest": func(rs []*kgo.Record) [][]*kgo.Record { return [][]*kgo.Record{rs[:2], rs[2:]} },
		}
		for split, cut := range splits {
			other := uuid.New()
			ids := newCatalogIDs()
			for _, batch := range cut(h.events(other, ids)) {
				apply(batch)
			}
			if got := snapshot(t, pool, other); got.rows != want.rows {
				t.Errorf("%s, %s: rows\n%s\nwant (one event a batch)\n%s", name, split, got.rows, want.rows)
			}
		}
	}
}

// catalogIDs are the ids of one run of a history: runs differ in ids only,
// and snapshot shows rows by name and title, not by id.
type catalogIDs struct {
	store, product, other uuid.UUID
	variants              []uuid.UUID
}

func newCatalogIDs() *catalogIDs {
	ids := &catalogIDs{store: uuid.New(), product: uuid.New(), other: uuid.New()}
	for range 3 {
		ids.variants = append(ids.variants, uuid.New())
	}
	return ids
}

func (c *catalogIDs) variant(i int, price string) schemas.CatalogVariant {
	return schemas.CatalogVariant{VariantID: c.variants[i], Title: "V", SKU: "SKU", Price: price, Category: "tshirt",
		RequiresYarnType: []string{"cotton"}}
}

var eventTime = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func storeEvent(t testing.TB, account, store uuid.UUID, name, status string) *kgo.Record {
	return eventRecord(t, schemas.TypeStoreUpserted, schemas.StoreUpserted{AccountID: account, StoreID: store, Name: name,
		ShopDomain: "shop.example", Status: status, UpdatedAt: eventTime})
}

func productEvent(t testing.TB, account, store, product uuid.UUID, title string, vs ...schemas.CatalogVariant) *kgo.Record {
	return eventRecord(t, schemas.TypeProductUpserted, schemas.ProductUpserted{AccountID: account, StoreID: store,
		ProductID: product, Title: title, Status: "ACTIVE", Variants: vs, UpdatedAt: eventTime})
}

func eventRecord(t testing.TB, typ string, data any) *kgo.Record {
	t.Helper()
	ev, err := schemas.NewEvent(typ, eventTime, data)
	if err != nil {
		t.Fatal(err)
	}
	v, err := codec.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: schemas.Naming{}.Topic(schemas.TopicCatalogEvents), Value: v}
}

type catalogSnapshot struct {
	rows                       string
	stores, products, variants int
}

// snapshot is an account's catalog rows by name and title, so two runs of
// a history on different ids compare equal.
func snapshot(t *testing.T, pool *pgxpool.Pool, account uuid.UUID) catalogSnapshot {
	t.Helper()
	var s catalogSnapshot
	if err := pool.QueryRow(context.Background(), `
		WITH st AS (SELECT * FROM stores WHERE account_id = $1),
		pr AS (SELECT * FROM products WHERE account_id = $1),
		va AS (SELECT * FROM variants WHERE account_id = $1)
		SELECT
			coalesce((SELECT string_agg(name || '/' || status, ', ' ORDER BY name) FROM st), '') || ' | ' ||
			coalesce((SELECT string_agg(p.title || '@' || s.name || '/' || p.status, ', ' ORDER BY p.title) FROM pr p JOIN st s USING (store_id)), '') || ' | ' ||
			coalesce((SELECT string_agg(p.title || '#' || v.position || '=' || v.price || array_to_string(v.requires_yarn_type, '+'), ', '
				ORDER BY p.title, v.position) FROM va v JOIN pr p USING (product_id)), ''),
			(SELECT count(*) FROM st), (SELECT count(*) FROM pr), (SELECT count(*) FROM va)`, account).
		Scan(&s.rows, &s.stores, &s.products, &s.variants); err != nil {
		t.Fatal(err)
	}
	return s
}

// BenchmarkProjectorBatch applies batches of 500 product events (4
// variants each) of one store: new products each time, and the same
// products again (every variant listed again, so the prune reads them all).
func BenchmarkProjectorBatch(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.NewPool(b)
	handle := Projector(schemas.Naming{}, slog.New(slog.DiscardHandler)).Handle
	account, store := uuid.New(), uuid.New()
	apply := func(recs []*kgo.Record) {
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := handle(ctx, tx, recs)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	apply([]*kgo.Record{storeEvent(b, account, store, "Shop", "ACTIVE")})
	products := func() []*kgo.Record {
		recs := make([]*kgo.Record, 500)
		for i := range recs {
			ids := newCatalogIDs()
			ids.variants = append(ids.variants, uuid.New())
			recs[i] = productEvent(b, account, store, ids.product, "Tee", ids.variant(0, "10.00"), ids.variant(1, "11.00"),
				ids.variant(2, "12.00"), ids.variant(3, "13.00"))
		}
		return recs
	}
	b.Run("new products", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			recs := products()
			b.StartTimer()
			apply(recs)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*500), "µs/event")
	})
	b.Run("the same products again", func(b *testing.B) {
		recs := products()
		apply(recs)
		b.ResetTimer()
		for range b.N {
			apply(recs)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*500), "µs/event")
	})
}
