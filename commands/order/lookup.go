package order

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Catalog is what validating and pricing an order needs to know of the
// catalog and the price tables. The read side answers it (the composition
// root adapts the catalog and configuration read models); the write side
// imports no read model.
type Catalog interface {
	// Variants are those of ids the account may order: another account's
	// variant is absent, as a missing one is. The image falls back to the
	// product's.
	Variants(ctx context.Context, account uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]Variant, error)
	// Rates are the shipping, side, yarn and country tables.
	Rates(ctx context.Context) (Rates, error)
}

// RatesCache keeps the rates Load returns for TTL (the tables change only
// with a migration).
type RatesCache struct {
	Load func(context.Context) (Rates, error)
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
	r, err := c.Load(ctx)
	if err != nil {
		return Rates{}, err
	}
	c.rates, c.loaded = r, time.Now()
	return r, nil
}
