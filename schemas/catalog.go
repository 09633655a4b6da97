package schemas

import (
	"time"

	"github.com/google/uuid"
)

// Catalog event types on TopicCatalogEvents.
const (
	TypeStoreUpserted   = "catalog.store_upserted"
	TypeProductUpserted = "catalog.product_upserted"
)

// StoreUpserted states a store's current shape. Applying it twice is harmless.
type StoreUpserted struct {
	AccountID  uuid.UUID `json:"account_id"`
	StoreID    uuid.UUID `json:"store_id"`
	Name       string    `json:"name"`
	ShopDomain string    `json:"shop_domain"`
	Status     string    `json:"status"`
	PlatformID string    `json:"platform_id,omitempty"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// ProductUpserted states a product's current shape with all its variants; a
// variant missing from Variants no longer exists.
type ProductUpserted struct {
	AccountID  uuid.UUID        `json:"account_id"`
	StoreID    uuid.UUID        `json:"store_id"`
	ProductID  uuid.UUID        `json:"product_id"`
	Title      string           `json:"title"`
	Status     string           `json:"status"`
	PlatformID string           `json:"platform_id,omitempty"`
	ImageURL   string           `json:"image_url,omitempty"`
	Variants   []CatalogVariant `json:"variants"`
	UpdatedAt  time.Time        `json:"updated_at"`
}

// CatalogVariant is one variant inside ProductUpserted. Price is a decimal string.
type CatalogVariant struct {
	VariantID        uuid.UUID `json:"variant_id"`
	Title            string    `json:"title"`
	SKU              string    `json:"sku"`
	Price            string    `json:"price"`
	Category         string    `json:"category"`
	RequiresYarnType []string  `json:"requires_yarn_type"`
	ImageURL         string    `json:"image_url,omitempty"`
}
