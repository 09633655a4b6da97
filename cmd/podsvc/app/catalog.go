package app

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/order"
	catalogrm "github.com/printpod/pod/projections/catalog"
	configrm "github.com/printpod/pod/projections/config"
	"github.com/shopspring/decimal"
)

// orderCatalog answers the write side's order.Catalog from the catalog and
// configuration read models: the one place the two sides meet.
type orderCatalog struct {
	catalog catalogrm.Queries
	rates   *order.RatesCache
}

func newOrderCatalog(pool *pgxpool.Pool) *orderCatalog {
	config := configrm.Queries{Pool: pool}
	return &orderCatalog{catalog: catalogrm.Queries{Pool: pool},
		rates: &order.RatesCache{Load: func(ctx context.Context) (order.Rates, error) { return loadRates(ctx, config) }, TTL: 30 * time.Second}}
}

func (c *orderCatalog) Variants(ctx context.Context, account uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]order.Variant, error) {
	found, err := c.catalog.Orderable(ctx, account, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]order.Variant, len(found))
	for _, v := range found {
		price, err := decimal.NewFromString(v.Price)
		if err != nil {
			return nil, fmt.Errorf("variant %s: price %q: %w", v.VariantID, v.Price, err)
		}
		out[v.VariantID] = order.Variant{VariantID: v.VariantID, ProductID: v.ProductID, StoreID: v.StoreID,
			StoreStatus: v.StoreStatus, ProductStatus: v.ProductStatus, Category: v.Category, RequiresYarnType: v.RequiresYarnType,
			Price: price, SKU: v.SKU, Title: v.Title, ImageURL: v.ImageURL}
	}
	return out, nil
}

func (c *orderCatalog) Rates(ctx context.Context) (order.Rates, error) { return c.rates.Get(ctx) }

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
