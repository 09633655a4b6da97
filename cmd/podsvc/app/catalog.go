package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/cache"
	"github.com/printpod/pod/internal/pgnotify"
	catalogrm "github.com/printpod/pod/projections/catalog"
	configrm "github.com/printpod/pod/projections/config"
	"github.com/shopspring/decimal"
)

// orderCatalog answers the write side's order.Catalog from the catalog and
// configuration read models: the one place the two sides meet. Answers are
// cached (internal/cache): a variant per account until the catalog
// projector announces a change, the rates (which change only with a
// migration) for their TTL.
type orderCatalog struct {
	catalog  catalogrm.Queries
	config   configrm.Queries
	variants cache.Cache[variantKey, order.Variant] // orderable ones only
	rates    cache.Cache[struct{}, order.Rates]
	loading  sync.Mutex // one load of the rates at a time
}

type variantKey struct{ account, variant uuid.UUID }

// newOrderCatalog answers from pool's read models; its variants follow the
// catalog's announcements on l until ctx ends.
func newOrderCatalog(ctx context.Context, pool *pgxpool.Pool, l *pgnotify.Listener) *orderCatalog {
	c := &orderCatalog{catalog: catalogrm.Queries{Pool: pool}, config: configrm.Queries{Pool: pool},
		variants: cache.Cache[variantKey, order.Variant]{Name: catalogrm.CacheName, TTL: time.Minute},
		rates:    cache.Cache[struct{}, order.Rates]{Name: "rates", TTL: 30 * time.Second}}
	c.variants.Follow(ctx, l)
	return c
}

// Variants are those of ids the account may order. Only what exists is
// cached: ids a client makes up must not fill memory.
func (c *orderCatalog) Variants(ctx context.Context, account uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]order.Variant, error) {
	keys := make([]variantKey, len(ids))
	for i, id := range ids {
		keys[i] = variantKey{account, id}
	}
	found, err := c.variants.LoadMany(keys, func(missing []variantKey) (map[variantKey]order.Variant, error) {
		ids := make([]uuid.UUID, len(missing))
		for i, k := range missing {
			ids[i] = k.variant
		}
		rows, err := c.catalog.Orderable(ctx, account, ids)
		if err != nil {
			return nil, err
		}
		out := make(map[variantKey]order.Variant, len(rows))
		for _, v := range rows {
			price, err := decimal.NewFromString(v.Price)
			if err != nil {
				return nil, fmt.Errorf("variant %s: price %q: %w", v.VariantID, v.Price, err)
			}
			out[variantKey{account, v.VariantID}] = order.Variant{VariantID: v.VariantID, ProductID: v.ProductID, StoreID: v.StoreID,
				StoreStatus: v.StoreStatus, ProductStatus: v.ProductStatus, Category: v.Category, RequiresYarnType: v.RequiresYarnType,
				Price: price, SKU: v.SKU, Title: v.Title, ImageURL: v.ImageURL}
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]order.Variant, len(found))
	for k, v := range found {
		out[k.variant] = v
	}
	return out, nil
}

// Rates are the price tables, loaded by one request at a time when the
// cached copy has expired.
func (c *orderCatalog) Rates(ctx context.Context) (order.Rates, error) {
	if r, ok := c.rates.Get(struct{}{}); ok {
		return r, nil
	}
	c.loading.Lock()
	defer c.loading.Unlock()
	return c.rates.Load(struct{}{}, func() (order.Rates, error) { return loadRates(ctx, c.config) })
}

// loadRates reads the shipping, side, yarn and country tables into the
// shape pricing uses.
func loadRates(ctx context.Context, q configrm.Queries) (order.Rates, error) {
	r := order.Rates{
		Shipping:       map[string]map[string]order.ShippingRate{},
		Sides:          map[string]map[string]decimal.Decimal{},
		Yarn:           map[string]map[string]decimal.Decimal{},
		Countries:      map[string]bool{},
		OrderAddonFees: map[string]decimal.Decimal{},
	}
	num := func(v json.Number) (decimal.Decimal, error) { return decimal.NewFromString(string(v)) }
	put := func(m map[string]map[string]decimal.Decimal, cat, code string, v json.Number) error {
		d, err := num(v)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", cat, code, err)
		}
		if m[cat] == nil {
			m[cat] = map[string]decimal.Decimal{}
		}
		m[cat][code] = d
		return nil
	}
	shipping, err := q.ShippingRates(ctx)
	if err != nil {
		return order.Rates{}, err
	}
	for _, s := range shipping {
		base, err1 := num(s.BaseRate)
		additional, err2 := num(s.AdditionalRate)
		if err1 != nil || err2 != nil {
			return order.Rates{}, fmt.Errorf("shipping rate %s/%s is not a number", s.Category, s.ServiceType)
		}
		if r.Shipping[s.Category] == nil {
			r.Shipping[s.Category] = map[string]order.ShippingRate{}
		}
		r.Shipping[s.Category][s.ServiceType] = order.ShippingRate{Base: base, Additional: additional}
	}
	sides, err := q.PricingSides(ctx)
	if err != nil {
		return order.Rates{}, err
	}
	for _, s := range sides {
		if err := put(r.Sides, s.Category, s.SideCode, s.Surcharge); err != nil {
			return order.Rates{}, fmt.Errorf("side surcharge %w", err)
		}
	}
	yarn, err := q.YarnTypes(ctx)
	if err != nil {
		return order.Rates{}, err
	}
	for _, y := range yarn {
		if err := put(r.Yarn, y.Category, y.TypeCode, y.ExtraCost); err != nil {
			return order.Rates{}, fmt.Errorf("yarn cost %w", err)
		}
	}
	countries, err := q.CountryCodes(ctx)
	if err != nil {
		return order.Rates{}, err
	}
	for _, c := range countries {
		r.Countries[c.Code] = true
	}
	return r, nil
}

// shopCatalog answers the push side's questions of the catalog read model
// (a store's shop domain; whether a shop's credentials work, for the
// built-in platform) from memory, dropped, like orderCatalog's variants,
// when the catalog projector announces a change.
type shopCatalog struct {
	catalog    catalogrm.Queries
	domains    cache.Cache[uuid.UUID, string]
	authorized cache.Cache[string, bool]
}

func newShopCatalog(ctx context.Context, pool *pgxpool.Pool, l *pgnotify.Listener) *shopCatalog {
	s := &shopCatalog{catalog: catalogrm.Queries{Pool: pool},
		domains:    cache.Cache[uuid.UUID, string]{Name: catalogrm.CacheName, TTL: time.Minute},
		authorized: cache.Cache[string, bool]{Name: catalogrm.CacheName, TTL: time.Minute}}
	s.domains.Follow(ctx, l)
	s.authorized.Follow(ctx, l)
	return s
}

// ShopDomains tells the shop domain of each of the stores ids that exists
// (push.Worker's Shops).
func (s *shopCatalog) ShopDomains(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]string, error) {
	return s.domains.LoadMany(ids, func(missing []uuid.UUID) (map[uuid.UUID]string, error) {
		return s.catalog.ShopDomains(ctx, missing)
	})
}

// Authorized reports whether a shop's credentials work: not when its
// store is in CREDENTIAL_ERROR (the built-in platform's check).
func (s *shopCatalog) Authorized(ctx context.Context, shop string) (bool, error) {
	return s.authorized.Load(shop, func() (bool, error) { return s.catalog.ShopAuthorized(ctx, shop) })
}
