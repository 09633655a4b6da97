// Package catalog projects pod.catalog.events into the stores, products and
// variants tables and answers the catalog queries of the API.
//
// The projector is the consumer "projections.catalog". Each event states an
// item's whole shape, so applying one is an upsert; a product's variants that
// are missing from its latest event are deleted. Offsets are stored in the
// same transaction (internal/stream), so every event is applied once.
//
// Queries are scoped to an account: a store or product of another account is
// reported exactly as a missing one (ErrNotFound).
package catalog
