package catalog

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/schemas"
	"github.com/shopspring/decimal"
)

// File is the JSON document `podctl catalog import` reads.
type File struct {
	Stores []StoreDoc `json:"stores"`
}

// StoreDoc is a store with its products. StoreID may be omitted.
type StoreDoc struct {
	StoreID    *uuid.UUID   `json:"store_id,omitempty"`
	Name       string       `json:"name"`
	ShopDomain string       `json:"shop_domain"`
	Status     string       `json:"status"`
	PlatformID string       `json:"platform_id,omitempty"`
	Products   []ProductDoc `json:"products"`
}

// ProductDoc is a product with its variants. ProductID may be omitted.
type ProductDoc struct {
	ProductID  *uuid.UUID   `json:"product_id,omitempty"`
	Title      string       `json:"title"`
	Status     string       `json:"status"`
	PlatformID string       `json:"platform_id,omitempty"`
	ImageURL   string       `json:"image_url,omitempty"`
	Variants   []VariantDoc `json:"variants"`
}

// VariantDoc is one variant. RequiresYarnType defaults to the category's yarn
// types when omitted (null); an explicit [] means none.
type VariantDoc struct {
	VariantID        *uuid.UUID `json:"variant_id,omitempty"`
	Title            string     `json:"title"`
	SKU              string     `json:"sku"`
	Price            string     `json:"price"`
	Category         string     `json:"category"`
	RequiresYarnType []string   `json:"requires_yarn_type"`
	ImageURL         string     `json:"image_url,omitempty"`
}

var idNamespace = uuid.MustParse("0b6f7c1e-3f52-4c59-8a0e-5d2b9e4a7c31")

// StoreID is the id a store without an explicit id gets.
func StoreID(account uuid.UUID, shopDomain string) uuid.UUID {
	return uuid.NewSHA1(idNamespace, []byte(account.String()+"/store/"+strings.ToLower(shopDomain)))
}

// fileOptions read a catalog file exactly: one document, every member
// named by a field, in its own case, once. What the parser let pass would
// be dropped, and with --archive-missing a dropped product is archived.
var fileOptions = jsonv2.JoinOptions(json.DefaultOptionsV1(), jsonv2.RejectUnknownMembers(true),
	jsonv2.MatchCaseInsensitiveNames(false), jsontext.AllowDuplicateNames(false))

// maxFileBytes bounds a catalog file (found by review: any size was read
// whole into memory). Each product's event is bounded on its own
// (MaxEventBytes).
var maxFileBytes int64 = 256 << 20

// Parse reads and validates a catalog file. Every problem is reported, each
// with its JSON path.
func Parse(r io.Reader) (File, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return File{}, fmt.Errorf("catalog file: %w", err)
	}
	if int64(len(b)) > maxFileBytes {
		return File{}, fmt.Errorf("catalog file: larger than %d MiB: split it, a store or a few per file", maxFileBytes>>20)
	}
	var f File
	if err := jsonv2.Unmarshal(b, &f, fileOptions); err != nil {
		return File{}, fmt.Errorf("catalog file: %w", err)
	}
	if err := f.Validate(); err != nil {
		return File{}, err
	}
	return f, nil
}

// Validate reports every problem of f, joined.
func (f File) Validate() error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if len(f.Stores) == 0 {
		bad("stores", "at least one store is required")
	}
	text := func(path, s string) {
		if p := textProblem(s); p != "" {
			bad(path, "%s", p)
		}
	}
	domains := map[string]bool{}
	// Ids named or derived twice in one file would make two entries one
	// row, the last one read. Derived ids are computed for a placeholder
	// account: within one file they collide exactly when they would for
	// the real one.
	stores, products, variants := map[uuid.UUID]string{}, map[uuid.UUID]string{}, map[uuid.UUID]string{}
	once := func(seen map[uuid.UUID]string, id uuid.UUID, path, what string) {
		if first, ok := seen[id]; ok {
			bad(path, "has the id of %s (%s); give each its own", first, what)
			return
		}
		seen[id] = path
	}
	for i, s := range f.Stores {
		text(fmt.Sprintf("stores[%d].name", i), s.Name)
		text(fmt.Sprintf("stores[%d].shop_domain", i), s.ShopDomain)
		text(fmt.Sprintf("stores[%d].platform_id", i), s.PlatformID)
		sp := fmt.Sprintf("stores[%d]", i)
		if strings.TrimSpace(s.Name) == "" {
			bad(sp+".name", "required")
		}
		if strings.TrimSpace(s.ShopDomain) == "" {
			bad(sp+".shop_domain", "required")
		} else if domains[strings.ToLower(s.ShopDomain)] {
			bad(sp+".shop_domain", "%q appears twice", s.ShopDomain)
		}
		domains[strings.ToLower(s.ShopDomain)] = true
		if !slices.Contains(StoreStatuses, s.Status) {
			bad(sp+".status", "%q is not one of %s", s.Status, strings.Join(StoreStatuses, ", "))
		}
		storeID := s.id(uuid.Nil)
		if s.StoreID != nil {
			once(stores, storeID, sp, "store_id")
		}
		for j, p := range s.Products {
			pp := fmt.Sprintf("%s.products[%d]", sp, j)
			productID := p.id(storeID)
			switch {
			case p.ProductID != nil:
				once(products, productID, pp, "product_id")
			case p.PlatformID != "":
				once(products, productID, pp, "a product's id comes from its platform_id")
			default:
				once(products, productID, pp, "a product's id comes from its title when it has no platform_id or product_id")
			}
			text(pp+".title", p.Title)
			text(pp+".platform_id", p.PlatformID)
			text(pp+".image_url", p.ImageURL)
			if strings.TrimSpace(p.Title) == "" {
				bad(pp+".title", "required")
			}
			if !slices.Contains(ProductStatuses, p.Status) {
				bad(pp+".status", "%q is not one of %s", p.Status, strings.Join(ProductStatuses, ", "))
			}
			if p.ImageURL != "" && !isHTTPURL(p.ImageURL) {
				bad(pp+".image_url", "must be an http(s) URL")
			}
			if len(p.Variants) == 0 {
				bad(pp+".variants", "at least one variant is required")
			}
			skus := map[string]bool{}
			for k, v := range p.Variants {
				vp := fmt.Sprintf("%s.variants[%d]", pp, k)
				text(vp+".title", v.Title)
				text(vp+".sku", v.SKU)
				text(vp+".image_url", v.ImageURL)
				if strings.TrimSpace(v.SKU) == "" {
					bad(vp+".sku", "required")
				} else if skus[v.SKU] {
					bad(vp+".sku", "%q appears twice in the product", v.SKU)
				}
				skus[v.SKU] = true
				if v.VariantID != nil {
					once(variants, v.id(productID), vp, "variant_id")
				}
				if strings.TrimSpace(v.Title) == "" {
					bad(vp+".title", "required")
				}
				if !priceText.MatchString(v.Price) {
					bad(vp+".price", "%q is not an amount from 0 to %s with at most 2 decimals", v.Price, maxPrice)
				}
				if !KnownCategory(v.Category) {
					bad(vp+".category", "%q is not one of %s", v.Category, strings.Join(Categories, ", "))
				} else {
					for _, y := range v.RequiresYarnType {
						if !slices.Contains(YarnTypes[v.Category], y) {
							bad(vp+".requires_yarn_type", "%q is not a yarn type of %s", y, v.Category)
						}
					}
				}
				if v.ImageURL != "" && !isHTTPURL(v.ImageURL) {
					bad(vp+".image_url", "must be an http(s) URL")
				}
			}
		}
	}
	return errors.Join(errs...)
}

// maxPrice is the largest price the read model stores (numeric(12, 2)).
var maxPrice = decimal.RequireFromString("9999999999.99")

// priceText is a price as a file gives it: plain digits, up to maxPrice,
// with at most 2 decimals; no sign, exponent or spaces.
var priceText = regexp.MustCompile(`^[0-9]{1,10}(\.[0-9]{1,2})?$`)

// textProblem reports a string Postgres cannot store or a display cannot use.
func textProblem(s string) string {
	switch {
	case strings.ContainsRune(s, 0):
		return "contains a NUL character"
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case len(s) > 1000:
		return "is longer than 1000 bytes"
	}
	return ""
}

// Events turns the file into the events that state it, for account, in
// publishing order: each store followed by its products.
func (f File) Events(account uuid.UUID, now time.Time) ([]Keyed, error) {
	var out []Keyed
	for i, s := range f.Stores {
		storeID := s.id(account)
		ev, err := schemas.NewEvent(schemas.TypeStoreUpserted, now, schemas.StoreUpserted{
			AccountID: account, StoreID: storeID, Name: s.Name, ShopDomain: s.ShopDomain,
			Status: s.Status, PlatformID: s.PlatformID, UpdatedAt: now,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, Keyed{Key: storeID, Event: ev})
		for j, p := range s.Products {
			productID := p.id(storeID)
			vs := make([]schemas.CatalogVariant, 0, len(p.Variants))
			for _, v := range p.Variants {
				variantID := v.id(productID)
				yarn := v.RequiresYarnType
				if yarn == nil {
					yarn = YarnTypes[v.Category]
				}
				price, _ := decimal.NewFromString(v.Price)
				vs = append(vs, schemas.CatalogVariant{
					VariantID: variantID, Title: v.Title, SKU: v.SKU, Price: price.StringFixed(2),
					Category: v.Category, RequiresYarnType: slices.Clone(yarn), ImageURL: v.ImageURL,
				})
			}
			ev, err := schemas.NewEvent(schemas.TypeProductUpserted, now, schemas.ProductUpserted{
				AccountID: account, StoreID: storeID, ProductID: productID, Title: p.Title,
				Status: p.Status, PlatformID: p.PlatformID, ImageURL: p.ImageURL, Variants: vs, UpdatedAt: now,
			})
			if err != nil {
				return nil, err
			}
			if len(ev.Data) > MaxEventBytes {
				return nil, fmt.Errorf("stores[%d].products[%d]: its %d variants make an event of %d KiB, over the %d KiB "+
					"one product may take; split it into products of fewer variants", i, j, len(p.Variants), len(ev.Data)>>10, MaxEventBytes>>10)
			}
			out = append(out, Keyed{Key: storeID, Event: ev})
		}
	}
	return out, nil
}

// MaxEventBytes bounds one product's event (all its variants), well inside
// Kafka's default 1 MB record limit: a file with a larger product is
// refused before any of its events is published, not published in part.
const MaxEventBytes = 768 << 10

// id is the store's id for account: its store_id, else derived.
func (s StoreDoc) id(account uuid.UUID) uuid.UUID {
	if s.StoreID != nil {
		return *s.StoreID
	}
	return StoreID(account, s.ShopDomain)
}

// id is the product's id in store: its product_id, else derived from its
// platform id or title.
func (p ProductDoc) id(store uuid.UUID) uuid.UUID {
	if p.ProductID != nil {
		return *p.ProductID
	}
	natural := p.PlatformID
	if natural == "" {
		natural = "title:" + p.Title
	}
	return uuid.NewSHA1(store, []byte("product/"+natural))
}

// id is the variant's id in product: its variant_id, else derived from its SKU.
func (v VariantDoc) id(product uuid.UUID) uuid.UUID {
	if v.VariantID != nil {
		return *v.VariantID
	}
	return uuid.NewSHA1(product, []byte("variant/"+v.SKU))
}

// Keyed is an event with its record key.
type Keyed struct {
	Key   uuid.UUID
	Event schemas.Event
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
