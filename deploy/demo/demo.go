// Package demo embeds the demo catalog loaded outside production.
package demo

import _ "embed"

// Catalog is catalog.json: the demo account's stores, products and variants,
// in the `podctl catalog import` format.
//
//go:embed catalog.json
var Catalog []byte
