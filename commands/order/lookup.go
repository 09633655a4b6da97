package order

import (
	"context"

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
