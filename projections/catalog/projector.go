package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/cache"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumerName is the projector's consumer group; chosen once.
const ConsumerName = "projections.catalog"

// Tables are the read model tables this projector owns (podctl replay empties them).
var Tables = []string{"variants", "products", "stores"}

// CacheName is the name the catalog's cached answers (internal/cache) are
// dropped by: every batch of this projector announces it.
const CacheName = "catalog"

// errBadPayload marks an event that can never be applied; it is skipped.
var errBadPayload = errors.New("bad payload")

// Projector returns the consumer that builds the catalog read model.
func Projector(n schemas.Naming, _ *slog.Logger) stream.Consumer {
	return stream.Consumer{
		Name:   ConsumerName,
		Topics: []string{n.Topic(schemas.TopicCatalogEvents)},
		Handle: stream.Sink(func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
			for _, rec := range recs {
				// A record that cannot be decoded, or that Postgres refuses for
				// its data (a value out of range, a NUL byte: SQLSTATE class
				// 22, permanent to the runner), is dead-lettered by the runner
				// instead of stalling the partition behind it.
				ev, err := schemas.ParseEvent(rec.Value)
				if err != nil {
					return stream.Poison(fmt.Errorf("catalog record %d/%d: %w", rec.Partition, rec.Offset, err))
				}
				if err := apply(ctx, tx, ev); err != nil {
					if errors.Is(err, errBadPayload) {
						err = stream.Poison(err)
					}
					return fmt.Errorf("catalog event %s: %w", ev.ID, err)
				}
			}
			b := &pgx.Batch{}
			cache.QueueAnnounce(b, CacheName)
			return tx.SendBatch(ctx, b).Close()
		}),
	}
}

func apply(ctx context.Context, tx pgx.Tx, ev schemas.Event) error {
	switch ev.Type {
	case schemas.TypeStoreUpserted:
		var s schemas.StoreUpserted
		if err := ev.Decode(&s); err != nil {
			return fmt.Errorf("%w: %w", errBadPayload, err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO stores (store_id, account_id, name, shop_domain, status, platform_id, updated_at)
			VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), $7)
			ON CONFLICT (store_id) DO UPDATE SET name = EXCLUDED.name, shop_domain = EXCLUDED.shop_domain,
				status = EXCLUDED.status, platform_id = EXCLUDED.platform_id, updated_at = EXCLUDED.updated_at
			WHERE stores.account_id = EXCLUDED.account_id`,
			s.StoreID, s.AccountID, s.Name, s.ShopDomain, s.Status, s.PlatformID, s.UpdatedAt)
		if err != nil {
			return fmt.Errorf("upsert store %s: %w", s.StoreID, err)
		}
	case schemas.TypeProductUpserted:
		var p schemas.ProductUpserted
		if err := ev.Decode(&p); err != nil {
			return fmt.Errorf("%w: %w", errBadPayload, err)
		}
		tag, err := tx.Exec(ctx, `INSERT INTO products (product_id, store_id, account_id, title, status, platform_id, image_url, updated_at)
			SELECT $1, $2, $3, $4, $5, NULLIF($6, ''), NULLIF($7, ''), $8
			FROM stores WHERE store_id = $2 AND account_id = $3
			ON CONFLICT (product_id) DO UPDATE SET title = EXCLUDED.title, status = EXCLUDED.status,
				platform_id = EXCLUDED.platform_id, image_url = EXCLUDED.image_url, updated_at = EXCLUDED.updated_at
			WHERE products.store_id = EXCLUDED.store_id`,
			p.ProductID, p.StoreID, p.AccountID, p.Title, p.Status, p.PlatformID, p.ImageURL, p.UpdatedAt)
		if err != nil {
			return fmt.Errorf("upsert product %s: %w", p.ProductID, err)
		}
		if tag.RowsAffected() == 0 {
			return nil // unknown store or a product id owned by another store: ignored
		}
		ids := make([]string, 0, len(p.Variants))
		batch := &pgx.Batch{}
		for i, v := range p.Variants {
			ids = append(ids, v.VariantID.String())
			batch.Queue(`INSERT INTO variants (variant_id, product_id, store_id, account_id, position, title, sku, price, category, requires_yarn_type, image_url)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8::numeric, $9, $10, NULLIF($11, ''))
				ON CONFLICT (variant_id) DO UPDATE SET position = EXCLUDED.position, title = EXCLUDED.title,
					sku = EXCLUDED.sku, price = EXCLUDED.price, category = EXCLUDED.category,
					requires_yarn_type = EXCLUDED.requires_yarn_type, image_url = EXCLUDED.image_url
				WHERE variants.product_id = EXCLUDED.product_id`,
				v.VariantID, p.ProductID, p.StoreID, p.AccountID, i, v.Title, v.SKU, v.Price, v.Category, v.RequiresYarnType, v.ImageURL)
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return fmt.Errorf("upsert variants of %s: %w", p.ProductID, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM variants WHERE product_id = $1 AND NOT (variant_id = ANY($2::uuid[]))`,
			p.ProductID, ids); err != nil {
			return fmt.Errorf("prune variants of %s: %w", p.ProductID, err)
		}
	}
	return nil
}
