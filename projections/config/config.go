// Package config answers the configuration table reads (/v1/config/*).
// The tables are seeded by migrations and shared by every account. Amounts
// are returned as JSON numbers written exactly as stored (two decimals).
package config

import (
	"context"
	"fmt"

	json "github.com/go-json-experiment/json/v1"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ShippingRate is one row of the shipping rates table.
type ShippingRate struct {
	Category       string      `json:"category"`
	ServiceType    string      `json:"service_type"`
	BaseRate       json.Number `json:"base_rate"`
	AdditionalRate json.Number `json:"additional_rate"`
}

// SideSurcharge is one row of the pricing sides table.
type SideSurcharge struct {
	Category  string      `json:"category"`
	SideCode  string      `json:"side_code"`
	Surcharge json.Number `json:"surcharge"`
}

// YarnType is one row of the yarn types table.
type YarnType struct {
	Category  string      `json:"category"`
	TypeCode  string      `json:"type_code"`
	ExtraCost json.Number `json:"extra_cost"`
}

// Country is one row of the country codes table.
type Country struct {
	Code string `json:"code"`
	Name string `json:"name"`
}

// Queries reads the configuration tables.
type Queries struct{ Pool *pgxpool.Pool }

// ShippingRates lists every shipping rate.
func (q Queries) ShippingRates(ctx context.Context) ([]ShippingRate, error) {
	return collect(ctx, q.Pool, `SELECT category, service_type, base_rate::text, additional_rate::text
		FROM shipping_rates ORDER BY category, service_type`, func(r pgx.CollectableRow) (ShippingRate, error) {
		var s ShippingRate
		return s, r.Scan(&s.Category, &s.ServiceType, &s.BaseRate, &s.AdditionalRate)
	})
}

// PricingSides lists every side surcharge.
func (q Queries) PricingSides(ctx context.Context) ([]SideSurcharge, error) {
	return collect(ctx, q.Pool, `SELECT category, side_code, surcharge::text
		FROM pricing_sides ORDER BY category, side_code`, func(r pgx.CollectableRow) (SideSurcharge, error) {
		var s SideSurcharge
		return s, r.Scan(&s.Category, &s.SideCode, &s.Surcharge)
	})
}

// YarnTypes lists every yarn type.
func (q Queries) YarnTypes(ctx context.Context) ([]YarnType, error) {
	return collect(ctx, q.Pool, `SELECT category, type_code, extra_cost::text
		FROM yarn_types ORDER BY category, type_code`, func(r pgx.CollectableRow) (YarnType, error) {
		var y YarnType
		return y, r.Scan(&y.Category, &y.TypeCode, &y.ExtraCost)
	})
}

// CountryCodes lists every valid country code.
func (q Queries) CountryCodes(ctx context.Context) ([]Country, error) {
	return collect(ctx, q.Pool, `SELECT code, name FROM country_codes ORDER BY code`,
		func(r pgx.CollectableRow) (Country, error) {
			var c Country
			return c, r.Scan(&c.Code, &c.Name)
		})
}

func collect[T any](ctx context.Context, pool *pgxpool.Pool, sql string, scan pgx.RowToFunc[T]) ([]T, error) {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return out, nil
}
