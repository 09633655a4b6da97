package catalog

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/schemas"
)

func validFile() File {
	return File{Stores: []StoreDoc{{
		Name: "S", ShopDomain: "s.myshopify.com", Status: "ACTIVE",
		Products: []ProductDoc{{
			Title: "Hoodie", Status: "ACTIVE", PlatformID: "p1",
			Variants: []VariantDoc{{Title: "M", SKU: "H-M", Price: "30", Category: "hoodie"}},
		}},
	}}}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(f *File)
		want   string // "" = valid
	}{
		{"valid", func(*File) {}, ""},
		{"no stores", func(f *File) { f.Stores = nil }, "stores: at least one store"},
		{"store name", func(f *File) { f.Stores[0].Name = " " }, "stores[0].name: required"},
		{"store status", func(f *File) { f.Stores[0].Status = "OPEN" }, "stores[0].status"},
		{"duplicate domain", func(f *File) { f.Stores = append(f.Stores, f.Stores[0]) }, "stores[1].shop_domain"},
		{"product status", func(f *File) { f.Stores[0].Products[0].Status = "LIVE" }, "products[0].status"},
		{"no variants", func(f *File) { f.Stores[0].Products[0].Variants = nil }, "products[0].variants: at least one"},
		{"bad price", func(f *File) { f.Stores[0].Products[0].Variants[0].Price = "12,50" }, "variants[0].price"},
		{"negative price", func(f *File) { f.Stores[0].Products[0].Variants[0].Price = "-1" }, "variants[0].price"},
		{"three decimals", func(f *File) { f.Stores[0].Products[0].Variants[0].Price = "1.005" }, "variants[0].price"},
		{"price over the stored range", func(f *File) { f.Stores[0].Products[0].Variants[0].Price = "10000000000" }, "variants[0].price"},
		{"a price with an exponent", func(f *File) { f.Stores[0].Products[0].Variants[0].Price = "1e2" }, "variants[0].price"},
		{"a price with a sign", func(f *File) { f.Stores[0].Products[0].Variants[0].Price = "+5" }, "variants[0].price"},
		{"a price with a space", func(f *File) { f.Stores[0].Products[0].Variants[0].Price = " 5" }, "variants[0].price"},
		{"a price of two decimals", func(f *File) { f.Stores[0].Products[0].Variants[0].Price = "9999999999.99" }, ""},
		{"NUL in a title", func(f *File) { f.Stores[0].Products[0].Title = "Hood\x00ie" }, "products[0].title: contains a NUL"},
		{"unknown category", func(f *File) { f.Stores[0].Products[0].Variants[0].Category = "sock" }, "variants[0].category"},
		{"yarn of another category", func(f *File) { f.Stores[0].Products[0].Variants[0].RequiresYarnType = []string{"plat_emb"} }, "requires_yarn_type"},
		{"duplicate sku", func(f *File) {
			p := &f.Stores[0].Products[0]
			p.Variants = append(p.Variants, p.Variants[0])
		}, "variants[1].sku"},
		{"image url scheme", func(f *File) { f.Stores[0].Products[0].ImageURL = "ftp://x/y.png" }, "products[0].image_url"},
		{"two products of one title and no platform id are one product", func(f *File) {
			p := &f.Stores[0].Products
			(*p)[0].PlatformID = ""
			other := (*p)[0]
			other.Variants = []VariantDoc{{Title: "L", SKU: "H-L", Price: "30", Category: "hoodie"}}
			*p = append(*p, other)
		}, "stores[0].products[1]: has the id of stores[0].products[0]"},
		{"two products of one platform id are one product", func(f *File) {
			p := &f.Stores[0].Products
			other := (*p)[0]
			other.Title = "Zip hoodie"
			*p = append(*p, other)
		}, "stores[0].products[1]: has the id of stores[0].products[0]"},
		{"one title in two stores is two products", func(f *File) {
			other := f.Stores[0]
			other.ShopDomain = "t.myshopify.com"
			f.Stores = append(f.Stores, other)
		}, ""},
		{"a variant id given twice", func(f *File) {
			id := uuid.New()
			p := &f.Stores[0].Products[0]
			p.Variants = append(p.Variants, VariantDoc{Title: "L", SKU: "H-L", Price: "30", Category: "hoodie"})
			p.Variants[0].VariantID, p.Variants[1].VariantID = &id, &id
		}, "variants[1]: has the id of stores[0].products[0].variants[0]"},
		{"a store id given twice", func(f *File) {
			id := uuid.New()
			other := f.Stores[0]
			other.ShopDomain, other.Products = "t.myshopify.com", nil
			f.Stores = append(f.Stores, other)
			f.Stores[0].StoreID, f.Stores[1].StoreID = &id, &id
		}, "stores[1]: has the id of stores[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := validFile()
			tt.change(&f)
			err := f.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

// TestParseRefusesAFileOverItsLimit: a file over maxFileBytes is refused
// without being read whole; one at the limit is read (and validated).
func TestParseRefusesAFileOverItsLimit(t *testing.T) {
	file := `{"stores":[]}` + strings.Repeat(" ", 64)
	defer func(was int64) { maxFileBytes = was }(maxFileBytes)
	maxFileBytes = int64(len(file))
	if _, err := Parse(strings.NewReader(file)); err != nil && strings.Contains(err.Error(), "larger than") {
		t.Fatalf("a file at the limit: %v, want it read", err)
	}
	if _, err := Parse(strings.NewReader(file + " ")); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("a file a byte over the limit: %v, want it refused for its size", err)
	}
}

// TestParseRefusesWhatItWouldDrop: a file is read whole and exactly, as
// with --archive-missing a product the parser drops is archived. Found by
// review: a repeated key kept only its last list, and a second document
// after the first was ignored.
func TestParseRefusesWhatItWouldDrop(t *testing.T) {
	for name, tc := range map[string]struct{ file, want string }{
		"an unknown member":                 {`{"stores":[],"shops":[]}`, "shops"},
		"a member given twice":              {`{"stores":[],"stores":[]}`, "duplicate"},
		"a member in another case":          {`{"Stores":[]}`, "Stores"},
		"a second document after the first": {`{"stores":[]} {"stores":[]}`, "after top-level value"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%s): %v, want an error naming %q", tc.file, err, tc.want)
			}
		})
	}
}

func TestEventsAreDeterministicAndComplete(t *testing.T) {
	account := uuid.New()
	f := validFile()
	f.Stores[0].Products = append(f.Stores[0].Products, ProductDoc{
		Title: "Tote", Status: "DRAFT",
		Variants: []VariantDoc{{Title: "One", SKU: "T-1", Price: "9.5", Category: "tote", RequiresYarnType: []string{}}},
	})
	now := time.Now()
	a, err := f.Events(account, now)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := f.Events(account, now)
	if len(a) != 3 || a[0].Event.Type != schemas.TypeStoreUpserted || a[1].Event.Type != schemas.TypeProductUpserted {
		t.Fatalf("events: %+v", a)
	}
	var p1, p1again, p2 schemas.ProductUpserted
	_ = a[1].Event.Decode(&p1)
	_ = b[1].Event.Decode(&p1again)
	_ = a[2].Event.Decode(&p2)
	if p1.ProductID != p1again.ProductID || p1.Variants[0].VariantID != p1again.Variants[0].VariantID {
		t.Fatal("ids differ between two imports of the same file")
	}
	if a[1].Key != StoreID(account, "S.MYSHOPIFY.COM") || a[2].Key != a[0].Key {
		t.Fatal("products are not keyed by their store")
	}
	if !slices.Equal(p1.Variants[0].RequiresYarnType, YarnTypes["hoodie"]) {
		t.Fatalf("omitted yarn types default to the category's: %v", p1.Variants[0].RequiresYarnType)
	}
	if len(p2.Variants[0].RequiresYarnType) != 0 || p2.Variants[0].Price != "9.50" {
		t.Fatalf("tote variant: %+v", p2.Variants[0])
	}
	if other, _ := f.Events(uuid.New(), now); other[0].Key == a[0].Key {
		t.Fatal("two accounts importing one file share a store id")
	}
}

// TestAProductTooLargeForOneEventIsRefusedBeforeAnyIsPublished: a file
// whose product's variants would not fit in one record gets an error
// naming the product from Events, which runs before anything is
// published, so no import is left half applied.
func TestAProductTooLargeForOneEventIsRefusedBeforeAnyIsPublished(t *testing.T) {
	f := validFile()
	p := &f.Stores[0].Products[0]
	p.Variants = nil
	for i := range 6000 {
		p.Variants = append(p.Variants, VariantDoc{Title: fmt.Sprintf("size %d", i), SKU: fmt.Sprintf("H-%05d", i), Price: "30", Category: "hoodie"})
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	_, err := f.Events(uuid.New(), time.Now())
	if err == nil || !strings.Contains(err.Error(), "stores[0].products[0]: its 6000 variants") {
		t.Fatalf("Events of a product too large for one record: %v", err)
	}
	p.Variants = p.Variants[:100]
	if _, err := f.Events(uuid.New(), time.Now()); err != nil {
		t.Fatalf("a product of 100 variants: %v", err)
	}
}
