// Package catalog is the write side of the store catalog: the import file
// format, its validation, and publishing it as catalog events
// (catalog.store_upserted, catalog.product_upserted) keyed by store id, so a
// store's events stay in order on one partition.
//
// Imports are idempotent: ids missing from the file are derived from the
// account and the items' natural keys (shop domain, platform id or title, SKU),
// and every event states an item's whole current shape.
package catalog
