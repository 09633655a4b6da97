package catalog

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/cache"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumerName is the projector's consumer group; chosen once.
const ConsumerName = "projections.catalog"

// Tables are the read model tables this projector owns (a rebuild,
// projections.Rebuild, makes them again and swaps them in).
var Tables = []string{"variants", "products", "stores"}

// CacheName is the name the catalog's cached answers (internal/cache) are
// dropped by: every batch of this projector announces it.
const CacheName = "catalog"

// Projector returns the consumer that builds the catalog read model, a
// batch at a time: one round trip reads who owns the batch's stores and
// products, the events are then taken in order in memory, and two
// statements write what they left (one for the stores; one for the
// products, their variants and the variants their events no longer list).
// Each event states an item's whole shape, so of several events of one
// item the last is the one written. An event that would move an item to
// another owner (a store to another account, a product to another store)
// is ignored, and so is a product whose store is not there, or not the
// account's, when its event comes: as if the events were applied one by
// one. Ids derive from their owner's (a store's from its account, a
// product's from its store, a variant's from its product), so the
// publisher never makes such an event.
func Projector(n schemas.Naming, _ *slog.Logger) stream.Consumer {
	return projector(n, true)
}

// Rebuilder is the projector that writes a rebuild of the read model
// beside the live one (projections.Rebuild): the same writes, unannounced,
// since they are not in the read model requests read until the swap.
func Rebuilder(n schemas.Naming, _ *slog.Logger) stream.Consumer {
	return projector(n, false)
}

func projector(n schemas.Naming, announced bool) stream.Consumer {
	return stream.Consumer{
		Name:   ConsumerName,
		Topics: []string{n.Topic(schemas.TopicCatalogEvents)},
		Handle: stream.Sink(func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
			// A record that cannot be decoded, or that Postgres refuses for
			// its data (a value out of range, a NUL byte: SQLSTATE class
			// 22, permanent to the runner), is dead-lettered by the runner
			// instead of stalling the partition behind it.
			events := make([]catalogEvent, 0, len(recs))
			for _, rec := range recs {
				ev, err := decode(rec.Value)
				if err != nil {
					return stream.Poison(fmt.Errorf("catalog record %d/%d: %w", rec.Partition, rec.Offset, err))
				}
				events = append(events, ev)
			}
			up, err := load(ctx, tx, events)
			if err != nil {
				return err
			}
			for _, ev := range events {
				up.apply(ev)
			}
			b := &pgx.Batch{}
			up.queue(b)
			if announced {
				cache.QueueAnnounce(b, CacheName)
			}
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return fmt.Errorf("project catalog: %w", err)
			}
			return nil
		}),
	}
}

// catalogEvent is a decoded event: one of the two set, or neither (a type
// this projector does not apply).
type catalogEvent struct {
	store   *schemas.StoreUpserted
	product *schemas.ProductUpserted
}

func decode(value []byte) (catalogEvent, error) {
	var out catalogEvent
	ev, err := schemas.ParseEvent(value)
	if err != nil {
		return out, err
	}
	switch ev.Type {
	case schemas.TypeStoreUpserted:
		out.store = &schemas.StoreUpserted{}
		err = ev.Decode(out.store)
	case schemas.TypeProductUpserted:
		out.product = &schemas.ProductUpserted{}
		err = ev.Decode(out.product)
	}
	if err != nil {
		return out, fmt.Errorf("event %s: %w", ev.ID, err)
	}
	return out, nil
}

// upserts are what a batch writes: the last event applied of each store
// and product, in the order they were first met, and the owners known so
// far.
type upserts struct {
	stores     []schemas.StoreUpserted
	products   []schemas.ProductUpserted
	storeAt    map[uuid.UUID]int       // index in stores
	productAt  map[uuid.UUID]int       // index in products
	storeOwner map[uuid.UUID]uuid.UUID // store id: account
	productOf  map[uuid.UUID]uuid.UUID // product id: store
}

// load reads the owners of the stores and products the events name.
func load(ctx context.Context, tx pgx.Tx, events []catalogEvent) (*upserts, error) {
	u := &upserts{storeAt: map[uuid.UUID]int{}, productAt: map[uuid.UUID]int{},
		storeOwner: map[uuid.UUID]uuid.UUID{}, productOf: map[uuid.UUID]uuid.UUID{}}
	var storeIDs, productIDs []uuid.UUID
	for _, ev := range events {
		switch {
		case ev.store != nil:
			storeIDs = append(storeIDs, ev.store.StoreID)
		case ev.product != nil:
			storeIDs = append(storeIDs, ev.product.StoreID)
			productIDs = append(productIDs, ev.product.ProductID)
		}
	}
	if len(storeIDs) == 0 {
		return u, nil
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT store_id, account_id FROM stores WHERE store_id = ANY($1)`, storeIDs).Query(func(rows pgx.Rows) error {
		return scanPairs(rows, u.storeOwner)
	})
	if len(productIDs) > 0 {
		b.Queue(`SELECT product_id, store_id FROM products WHERE product_id = ANY($1)`, productIDs).Query(func(rows pgx.Rows) error {
			return scanPairs(rows, u.productOf)
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("read the catalog's owners: %w", err)
	}
	return u, nil
}

func scanPairs(rows pgx.Rows, into map[uuid.UUID]uuid.UUID) error {
	var k, v uuid.UUID
	_, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error {
		into[k] = v
		return nil
	})
	return err
}

// apply takes the next event of the batch.
func (u *upserts) apply(ev catalogEvent) {
	switch {
	case ev.store != nil:
		s := *ev.store
		if owner, ok := u.storeOwner[s.StoreID]; ok && owner != s.AccountID {
			return
		}
		u.storeOwner[s.StoreID] = s.AccountID
		u.stores = keepLast(u.stores, u.storeAt, s.StoreID, s)
	case ev.product != nil:
		p := *ev.product
		if owner, ok := u.storeOwner[p.StoreID]; !ok || owner != p.AccountID {
			return
		}
		if store, ok := u.productOf[p.ProductID]; ok && store != p.StoreID {
			return
		}
		u.productOf[p.ProductID] = p.StoreID
		u.products = keepLast(u.products, u.productAt, p.ProductID, p)
	}
}

// keepLast puts v, the item id's latest shape, in list: in place of an
// earlier one (at says where), else at the end.
func keepLast[T any](list []T, at map[uuid.UUID]int, id uuid.UUID, v T) []T {
	if i, ok := at[id]; ok {
		list[i] = v
		return list
	}
	at[id] = len(list)
	return append(list, v)
}

// queue queues the statements that apply u.
func (u *upserts) queue(b *pgx.Batch) {
	if n := len(u.stores); n > 0 {
		ids, accounts := make([]uuid.UUID, n), make([]uuid.UUID, n)
		names, domains, statuses, platforms := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		updated := make([]time.Time, n)
		for i, s := range u.stores {
			ids[i], accounts[i], names[i], domains[i], statuses[i], platforms[i], updated[i] =
				s.StoreID, s.AccountID, s.Name, s.ShopDomain, s.Status, s.PlatformID, s.UpdatedAt
		}
		b.Queue(`INSERT INTO stores (store_id, account_id, name, shop_domain, status, platform_id, updated_at)
			SELECT id, account, name, domain, status, NULLIF(platform, ''), updated
			FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[])
				AS s(id, account, name, domain, status, platform, updated)
			ON CONFLICT (store_id) DO UPDATE SET name = EXCLUDED.name, shop_domain = EXCLUDED.shop_domain,
				status = EXCLUDED.status, platform_id = EXCLUDED.platform_id, updated_at = EXCLUDED.updated_at
			WHERE stores.account_id = EXCLUDED.account_id`,
			ids, accounts, names, domains, statuses, platforms, updated)
	}
	n := len(u.products)
	if n == 0 {
		return
	}
	ids, stores, accounts := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n)
	titles, statuses, platforms, images := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	updated := make([]time.Time, n)
	// Never nil: pgx sends a nil slice as NULL, and <> ALL(NULL) would
	// prune nothing from a product whose event lists no variant.
	v := variantRows{ids: []uuid.UUID{}}
	for i, p := range u.products {
		ids[i], stores[i], accounts[i], titles[i], statuses[i], platforms[i], images[i], updated[i] =
			p.ProductID, p.StoreID, p.AccountID, p.Title, p.Status, p.PlatformID, p.ImageURL, p.UpdatedAt
		for pos, cv := range p.Variants {
			v.add(p, pos, cv)
		}
	}
	// The variants are written for the products written only: a product
	// ignored takes its variants with it. The two variant statements touch
	// different rows (listed, not listed), so they can share the statement.
	b.Queue(`WITH written AS (
			INSERT INTO products (product_id, store_id, account_id, title, status, platform_id, image_url, updated_at)
			SELECT p.id, p.store, p.account, p.title, p.status, NULLIF(p.platform, ''), NULLIF(p.image, ''), p.updated
			FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[])
				AS p(id, store, account, title, status, platform, image, updated)
			JOIN stores s ON s.store_id = p.store AND s.account_id = p.account
			ON CONFLICT (product_id) DO UPDATE SET title = EXCLUDED.title, status = EXCLUDED.status,
				platform_id = EXCLUDED.platform_id, image_url = EXCLUDED.image_url, updated_at = EXCLUDED.updated_at
			WHERE products.store_id = EXCLUDED.store_id
			RETURNING product_id),
		listed AS (
			INSERT INTO variants (variant_id, product_id, store_id, account_id, position, title, sku, price, category,
				requires_yarn_type, image_url)
			SELECT v.id, v.product, v.store, v.account, v.position, v.title, v.sku, v.price::numeric, v.category,
				ARRAY(SELECT jsonb_array_elements_text(v.yarn::jsonb)), NULLIF(v.image, '')
			FROM unnest($9::uuid[], $10::uuid[], $11::uuid[], $12::uuid[], $13::int[], $14::text[], $15::text[], $16::text[],
				$17::text[], $18::text[], $19::text[]) AS v(id, product, store, account, position, title, sku, price, category, yarn, image)
			JOIN written w ON w.product_id = v.product
			ON CONFLICT (variant_id) DO UPDATE SET position = EXCLUDED.position, title = EXCLUDED.title,
				sku = EXCLUDED.sku, price = EXCLUDED.price, category = EXCLUDED.category,
				requires_yarn_type = EXCLUDED.requires_yarn_type, image_url = EXCLUDED.image_url
			WHERE variants.product_id = EXCLUDED.product_id)
		DELETE FROM variants d USING written w
		WHERE d.product_id = w.product_id AND d.variant_id <> ALL($9::uuid[])`,
		ids, stores, accounts, titles, statuses, platforms, images, updated,
		v.ids, v.products, v.stores, v.accounts, v.positions, v.titles, v.skus, v.prices, v.categories, v.yarns, v.images)
}

// variantRows are the columns of a batch's variants, one row per variant
// id (the last listing when listed twice; ids derive from their product's,
// so only one product lists a variant).
type variantRows struct {
	ids, products, stores, accounts          []uuid.UUID
	positions                                []int32
	titles, skus, prices, categories, images []string
	yarns                                    []string // JSON arrays
	seen                                     map[uuid.UUID]int
}

func (v *variantRows) add(p schemas.ProductUpserted, pos int, cv schemas.CatalogVariant) {
	yarn, err := codec.Marshal(cv.RequiresYarnType)
	if err != nil || cv.RequiresYarnType == nil {
		yarn = []byte("[]")
	}
	if v.seen == nil {
		v.seen = map[uuid.UUID]int{}
	}
	i, ok := v.seen[cv.VariantID]
	if !ok {
		i = len(v.ids)
		v.seen[cv.VariantID] = i
		v.ids, v.products, v.stores, v.accounts = append(v.ids, uuid.Nil), append(v.products, uuid.Nil), append(v.stores, uuid.Nil), append(v.accounts, uuid.Nil)
		v.positions, v.titles, v.skus, v.prices = append(v.positions, 0), append(v.titles, ""), append(v.skus, ""), append(v.prices, "")
		v.categories, v.images, v.yarns = append(v.categories, ""), append(v.images, ""), append(v.yarns, "")
	}
	v.ids[i], v.products[i], v.stores[i], v.accounts[i] = cv.VariantID, p.ProductID, p.StoreID, p.AccountID
	v.positions[i], v.titles[i], v.skus[i], v.prices[i] = int32(pos), cv.Title, cv.SKU, cv.Price
	v.categories[i], v.images[i], v.yarns[i] = cv.Category, cv.ImageURL, string(yarn)
}
