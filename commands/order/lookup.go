package order

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	configrm "github.com/printpod/pod/projections/config"
	"github.com/shopspring/decimal"
)

// LoadVariants reads the variants an order names from the catalog read
// model, scoped to the account: another account's variant is absent, as a
// missing one is. The image falls back to the product's.
func LoadVariants(ctx context.Context, pool *pgxpool.Pool, account uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]Variant, error) {
	out := make(map[uuid.UUID]Variant, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := pool.Query(ctx, `SELECT v.variant_id, v.product_id, v.store_id, s.status, p.status, v.category,
		v.requires_yarn_type, v.price::text, v.sku, v.title, COALESCE(NULLIF(v.image_url, ''), NULLIF(p.image_url, ''), '')
		FROM variants v JOIN products p USING (product_id) JOIN stores s ON s.store_id = v.store_id
		WHERE v.variant_id = ANY($1) AND v.account_id = $2`, ids, account)
	if err != nil {
		return nil, fmt.Errorf("load variants: %w", err)
	}
	var v Variant
	var price string
	_, err = pgx.ForEachRow(rows, []any{&v.VariantID, &v.ProductID, &v.StoreID, &v.StoreStatus, &v.ProductStatus,
		&v.Category, &v.RequiresYarnType, &price, &v.SKU, &v.Title, &v.ImageURL}, func() error {
		p, err := decimal.NewFromString(price)
		if err != nil {
			return err
		}
		v.Price = p
		out[v.VariantID] = v
		v = Variant{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load variants: %w", err)
	}
	return out, nil
}

// RatesCache loads the configuration tables pricing needs and keeps them
// for TTL (they change only with a migration).
type RatesCache struct {
	Pool *pgxpool.Pool
	TTL  time.Duration

	mu     sync.Mutex
	rates  Rates
	loaded time.Time
}

// Get returns the rates, reloading them when older than TTL.
func (c *RatesCache) Get(ctx context.Context) (Rates, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded.IsZero() && time.Since(c.loaded) < c.TTL {
		return c.rates, nil
	}
	r, err := LoadRates(ctx, c.Pool)
	if err != nil {
		return Rates{}, err
	}
	c.rates, c.loaded = r, time.Now()
	return r, nil
}

// LoadRates reads the shipping, side, yarn and country tables.
func LoadRates(ctx context.Context, pool *pgxpool.Pool) (Rates, error) {
	q := configrm.Queries{Pool: pool}
	r := Rates{
		Shipping:       map[string]map[string]ShippingRate{},
		Sides:          map[string]map[string]decimal.Decimal{},
		Yarn:           map[string]map[string]decimal.Decimal{},
		Countries:      map[string]bool{},
		OrderAddonFees: map[string]decimal.Decimal{},
	}
	put := func(m map[string]map[string]decimal.Decimal, cat, code string, v json.Number) {
		if m[cat] == nil {
			m[cat] = map[string]decimal.Decimal{}
		}
		m[cat][code] = decimal.RequireFromString(string(v))
	}
	shipping, err := q.ShippingRates(ctx)
	if err != nil {
		return Rates{}, err
	}
	for _, s := range shipping {
		if r.Shipping[s.Category] == nil {
			r.Shipping[s.Category] = map[string]ShippingRate{}
		}
		r.Shipping[s.Category][s.ServiceType] = ShippingRate{Base: decimal.RequireFromString(string(s.BaseRate)),
			Additional: decimal.RequireFromString(string(s.AdditionalRate))}
	}
	sides, err := q.PricingSides(ctx)
	if err != nil {
		return Rates{}, err
	}
	for _, s := range sides {
		put(r.Sides, s.Category, s.SideCode, s.Surcharge)
	}
	yarn, err := q.YarnTypes(ctx)
	if err != nil {
		return Rates{}, err
	}
	for _, y := range yarn {
		put(r.Yarn, y.Category, y.TypeCode, y.ExtraCost)
	}
	countries, err := q.CountryCodes(ctx)
	if err != nil {
		return Rates{}, err
	}
	for _, c := range countries {
		r.Countries[c.Code] = true
	}
	return r, nil
}
