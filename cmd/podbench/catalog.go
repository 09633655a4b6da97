package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	json "github.com/go-json-experiment/json/v1"
)

// variant is the catalog entry every order of the run is placed for, found
// the way a client finds it: the account's stores, then a store's products.
type variant struct {
	StoreID   string
	StoreName string
	ProductID string
	VariantID string
	SKU       string
	Category  string
	Yarn      []string // requires_yarn_type
}

type storeView struct {
	StoreID string `json:"store_id"`
	Name    string `json:"name"`
	Status  string `json:"status"`
}

type productView struct {
	ProductID string `json:"product_id"`
	Status    string `json:"status"`
	Variants  []struct {
		VariantID        string   `json:"variant_id"`
		SKU              string   `json:"sku"`
		Category         string   `json:"category"`
		RequiresYarnType []string `json:"requires_yarn_type"`
	} `json:"variants"`
}

// errNoVariant means the catalog has nothing to order (yet).
var errNoVariant = errors.New("no ACTIVE store with an ACTIVE product variant for this token")

// awaitVariant retries findVariant while the catalog is still empty: a
// podsvc that just started may still be loading its demo catalog.
func awaitVariant(ctx context.Context, a *api, category string, timeout time.Duration) (variant, error) {
	deadline := time.Now().Add(timeout)
	for {
		v, err := findVariant(ctx, a, category)
		if !errors.Is(err, errNoVariant) || time.Now().After(deadline) {
			return v, err
		}
		if !sleepUntil(ctx, time.Now().Add(250*time.Millisecond)) {
			return v, ctx.Err()
		}
	}
}

// findVariant picks a variant of an ACTIVE product of the first ACTIVE
// store, of the preferred category when there is one.
func findVariant(ctx context.Context, a *api, category string) (variant, error) {
	var stores struct {
		Data []storeView `json:"data"`
	}
	if err := a.call(ctx, "GET", "/v1/stores", nil, &stores); err != nil {
		return variant{}, err
	}
	for _, s := range stores.Data {
		if s.Status != "ACTIVE" {
			continue
		}
		var fallback *variant
		cursor := ""
		for {
			q := url.Values{"status": {"ACTIVE"}, "limit": {"100"}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			var page struct {
				Data       []productView `json:"data"`
				NextCursor *string       `json:"next_cursor"`
			}
			if err := a.call(ctx, "GET", "/v1/stores/"+s.StoreID+"/products?"+q.Encode(), nil, &page); err != nil {
				return variant{}, err
			}
			for _, p := range page.Data {
				for _, v := range p.Variants {
					cand := variant{StoreID: s.StoreID, StoreName: s.Name, ProductID: p.ProductID, VariantID: v.VariantID,
						SKU: v.SKU, Category: v.Category, Yarn: v.RequiresYarnType}
					if v.Category == category {
						return cand, nil
					}
					if fallback == nil {
						fallback = &cand
					}
				}
			}
			if page.NextCursor == nil || *page.NextCursor == "" {
				break
			}
			cursor = *page.NextCursor
		}
		if fallback != nil {
			return *fallback, nil
		}
	}
	return variant{}, fmt.Errorf("%w (%d stores)", errNoVariant, len(stores.Data))
}

// body is a valid create-order request for ref: a standard order with one
// line. The design URL carries the reference so no two orders of a run look
// alike to the soft-duplicate check.
func (v variant) body(ref string) []byte {
	line := map[string]any{
		"variant_id": v.VariantID,
		"quantity":   1,
		"sides":      map[string]string{"front_side": "https://img.example.com/podbench/" + ref + ".png"},
	}
	if len(v.Yarn) > 0 {
		line["emb_file"] = "Available"
		line["yarn_type"] = v.Yarn[0]
	} else {
		line["printing_technique"] = "DTG"
	}
	raw, _ := json.Marshal(map[string]any{
		"reference_id":     ref,
		"customer":         map[string]string{"email": "bench@example.com", "first_name": "Pod", "last_name": "Bench"},
		"shipping_address": map[string]string{"address1": "1 Main St", "city": "Austin", "province": "TX", "country_code": "US", "zip": "78701"},
		"shipping_service": "eco",
		"line_items":       []any{line},
	})
	return raw
}

// refMark stands for the reference in bodies' template.
const refMark = "podbench-reference-mark"

// bodies returns body for many references at the cost of copying bytes:
// the request is encoded once with a mark where the reference goes, and
// each call puts the reference in its places. The load generator calls it
// for every order; encoding each request afresh was a tenth of
// podbench's CPU, taken from the machine podsvc is measured on. A
// reference that would need escaping in JSON is encoded the slow way.
func (v variant) bodies() func(ref string) []byte {
	parts := bytes.Split(v.body(refMark), []byte(refMark))
	return func(ref string) []byte {
		if !plainRef(ref) {
			return v.body(ref)
		}
		size := len(ref) * (len(parts) - 1)
		for _, p := range parts {
			size += len(p)
		}
		out := make([]byte, 0, size)
		for i, p := range parts {
			if i > 0 {
				out = append(out, ref...)
			}
			out = append(out, p...)
		}
		return out
	}
}

// plainRef reports whether ref is written in JSON as it is: letters,
// digits, '-' and '_'.
func plainRef(ref string) bool {
	for _, c := range []byte(ref) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
