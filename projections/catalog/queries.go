package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/internal/uuidtext"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNotFound means the store or product does not exist for the account.
var ErrNotFound = errors.New("not found")

// Store is the public shape of a store.
type Store struct {
	StoreID    uuid.UUID `json:"store_id"`
	Name       string    `json:"name"`
	ShopDomain string    `json:"shop_domain"`
	Status     string    `json:"status"`
}

// Product is the public shape of a product with all its variants.
type Product struct {
	ProductID uuid.UUID `json:"product_id"`
	Title     string    `json:"title"`
	Status    string    `json:"status"`
	Variants  []Variant `json:"variants"`
}

// Variant is the public shape of a variant. Price is a decimal string.
type Variant struct {
	VariantID        uuid.UUID `json:"variant_id"`
	Title            string    `json:"title"`
	SKU              string    `json:"sku"`
	Price            string    `json:"price"`
	Category         string    `json:"category"`
	RequiresYarnType []string  `json:"requires_yarn_type"`
}

// StoreKey is the keyset position of a store in the list (name, id).
type StoreKey struct {
	Name string    `json:"n"`
	ID   uuid.UUID `json:"i"`
}

// ProductKey is the keyset position of a product in a list (title, id).
type ProductKey struct {
	Title string    `json:"t"`
	ID    uuid.UUID `json:"i"`
}

// Search types of the product list.
const (
	SearchName       = "name"
	SearchProductID  = "product_id"
	SearchPlatformID = "platform_id"
	SearchSKU        = "sku"
)

// ProductQuery selects products of one store.
type ProductQuery struct {
	Q          string
	SearchType string // one of the Search* constants; empty = name
	Status     string // empty = any
	After      *ProductKey
	Limit      int
}

// Queries answers the catalog reads.
type Queries struct{ Pool *pgxpool.Pool }

// VisibleStoreStatuses are the statuses GET /v1/stores lists: every store the
// account can order against (an INACTIVE store is hidden).
var VisibleStoreStatuses = []string{"ACTIVE", "CREDENTIAL_ERROR"}

// ListStores returns up to limit stores after the key, ordered by name then
// id, and whether more follow.
func (q Queries) ListStores(ctx context.Context, account uuid.UUID, after *StoreKey, limit int) ([]Store, bool, error) {
	args := []any{account, VisibleStoreStatuses, limit + 1}
	where := ""
	if after != nil {
		where = " AND (name, store_id) > ($4, $5)"
		args = append(args, after.Name, after.ID)
	}
	rows, err := q.Pool.Query(ctx, `SELECT store_id, name, shop_domain, status FROM stores
		WHERE account_id = $1 AND status = ANY($2)`+where+` ORDER BY name, store_id LIMIT $3`, args...)
	if err != nil {
		return nil, false, fmt.Errorf("list stores: %w", err)
	}
	stores, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Store, error) {
		var s Store
		err := r.Scan(&s.StoreID, &s.Name, &s.ShopDomain, &s.Status)
		return s, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("list stores: %w", err)
	}
	more := len(stores) > limit
	if more {
		stores = stores[:limit]
	}
	return stores, more, nil
}

// StoreOwned reports ErrNotFound unless the store belongs to the account.
func (q Queries) StoreOwned(ctx context.Context, account, store uuid.UUID) error {
	var one int
	err := q.Pool.QueryRow(ctx, `SELECT 1 FROM stores WHERE store_id = $1 AND account_id = $2`, store, account).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("find store: %w", err)
	}
	return nil
}

// SearchProducts lists products of a store of the account, with all their
// variants, ordered by title then id. It returns ErrNotFound for a store the
// account does not own. The caller validates the query (SKU length, enums).
func (q Queries) SearchProducts(ctx context.Context, account, store uuid.UUID, pq ProductQuery) ([]Product, bool, error) {
	if err := q.StoreOwned(ctx, account, store); err != nil {
		return nil, false, err
	}
	var sb strings.Builder
	args := []any{store}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	sb.WriteString(`SELECT p.product_id, p.title, p.status FROM products p WHERE p.store_id = $1`)
	if pq.Status != "" {
		sb.WriteString(" AND p.status = " + arg(pq.Status))
	}
	if pq.Q != "" {
		switch pq.SearchType {
		case SearchProductID:
			id, err := uuidtext.Parse(pq.Q)
			if err != nil {
				return nil, false, nil // no product has a malformed id
			}
			sb.WriteString(" AND p.product_id = " + arg(id))
		case SearchPlatformID:
			sb.WriteString(" AND p.platform_id = " + arg(pq.Q))
		case SearchSKU:
			sb.WriteString(" AND p.product_id IN (SELECT v.product_id FROM variants v WHERE v.store_id = $1 AND v.sku ILIKE " +
				arg(likePattern(pq.Q)) + ")")
		default:
			sb.WriteString(" AND p.title ILIKE " + arg(likePattern(pq.Q)))
		}
	}
	if pq.After != nil {
		sb.WriteString(" AND (p.title, p.product_id) > (" + arg(pq.After.Title) + ", " + arg(pq.After.ID) + ")")
	}
	sb.WriteString(" ORDER BY p.title, p.product_id LIMIT " + arg(pq.Limit+1))

	// An unnamed statement is planned with the actual search text each time.
	// A cached generic plan cannot tell a rare pattern from a common one and
	// walks the whole title index; the planned one uses the trigram index.
	rows, err := q.Pool.Query(ctx, sb.String(), append([]any{pgx.QueryExecModeExec}, args...)...)
	if err != nil {
		return nil, false, fmt.Errorf("search products: %w", err)
	}
	products, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Product, error) {
		var p Product
		err := r.Scan(&p.ProductID, &p.Title, &p.Status)
		return p, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("search products: %w", err)
	}
	more := len(products) > pq.Limit
	if more {
		products = products[:pq.Limit]
	}
	if err := q.attachVariants(ctx, products); err != nil {
		return nil, false, err
	}
	return products, more, nil
}

// GetProduct returns one product of a store of the account with all its variants.
func (q Queries) GetProduct(ctx context.Context, account, store, product uuid.UUID) (Product, error) {
	var p Product
	err := q.Pool.QueryRow(ctx, `SELECT product_id, title, status FROM products
		WHERE product_id = $1 AND store_id = $2 AND account_id = $3`, product, store, account).
		Scan(&p.ProductID, &p.Title, &p.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		return Product{}, ErrNotFound
	}
	if err != nil {
		return Product{}, fmt.Errorf("get product: %w", err)
	}
	ps := []Product{p}
	if err := q.attachVariants(ctx, ps); err != nil {
		return Product{}, err
	}
	return ps[0], nil
}

func (q Queries) attachVariants(ctx context.Context, products []Product) error {
	if len(products) == 0 {
		return nil
	}
	ids := make([]string, len(products))
	index := make(map[uuid.UUID]int, len(products))
	for i := range products {
		ids[i] = products[i].ProductID.String()
		index[products[i].ProductID] = i
		products[i].Variants = []Variant{}
	}
	rows, err := q.Pool.Query(ctx, `SELECT product_id, variant_id, title, sku, price::text, category, requires_yarn_type
		FROM variants WHERE product_id = ANY($1::uuid[]) ORDER BY product_id, position`, ids)
	if err != nil {
		return fmt.Errorf("load variants: %w", err)
	}
	var (
		pid uuid.UUID
		v   Variant
	)
	_, err = pgx.ForEachRow(rows, []any{&pid, &v.VariantID, &v.Title, &v.SKU, &v.Price, &v.Category, &v.RequiresYarnType}, func() error {
		if v.RequiresYarnType == nil {
			v.RequiresYarnType = []string{}
		}
		i := index[pid]
		products[i].Variants = append(products[i].Variants, v)
		v = Variant{}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load variants: %w", err)
	}
	return nil
}

// likePattern turns user text into a case-insensitive "contains" pattern,
// escaping the LIKE wildcards it may hold.
func likePattern(q string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(q) + "%"
}

// WaitProjected waits until the catalog projector applied every offset in
// last (highest acknowledged offset per partition of the catalog topic).
func WaitProjected(ctx context.Context, pool *pgxpool.Pool, n schemas.Naming, last map[int32]int64) error {
	return stream.WaitApplied(ctx, pool, ConsumerName, n.Topic(schemas.TopicCatalogEvents), last)
}

// WaitCaughtUp waits until the catalog projector applied every event the
// catalog topic held when it was called: a reader that decides from the
// read model what the catalog lacks (an import archiving what a file no
// longer lists) then sees every product published before it.
func WaitCaughtUp(ctx context.Context, pool *pgxpool.Pool, cl *kgo.Client, n schemas.Naming) error {
	last, _, err := kafka.LastOffsets(ctx, kadm.NewClient(cl), n.Topic(schemas.TopicCatalogEvents))
	if err != nil {
		return err
	}
	return WaitProjected(ctx, pool, n, last)
}

// Orderable is a variant as an order names it: with its product's and
// store's status, and its image (else the product's, else "").
type Orderable struct {
	Variant
	ProductID     uuid.UUID
	StoreID       uuid.UUID
	StoreStatus   string
	ProductStatus string
	ImageURL      string
}

// Orderable reads the variants of ids that belong to the account; another
// account's variant is absent, as a missing one is.
func (q Queries) Orderable(ctx context.Context, account uuid.UUID, ids []uuid.UUID) ([]Orderable, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := q.Pool.Query(ctx, `SELECT v.variant_id, v.product_id, v.store_id, s.status, p.status, v.category,
		v.requires_yarn_type, v.price::text, v.sku, v.title, COALESCE(NULLIF(v.image_url, ''), NULLIF(p.image_url, ''), '')
		FROM variants v JOIN products p USING (product_id) JOIN stores s ON s.store_id = v.store_id
		WHERE v.variant_id = ANY($1) AND v.account_id = $2`, ids, account)
	if err != nil {
		return nil, fmt.Errorf("load variants: %w", err)
	}
	var out []Orderable
	var o Orderable
	_, err = pgx.ForEachRow(rows, []any{&o.VariantID, &o.ProductID, &o.StoreID, &o.StoreStatus, &o.ProductStatus,
		&o.Category, &o.RequiresYarnType, &o.Price, &o.SKU, &o.Title, &o.ImageURL}, func() error {
		out = append(out, o)
		o = Orderable{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load variants: %w", err)
	}
	return out, nil
}

// ShopAuthorized reports whether a shop's credentials work: not when its
// store is in CREDENTIAL_ERROR.
func (q Queries) ShopAuthorized(ctx context.Context, shop string) (bool, error) {
	var bad bool
	err := q.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM stores WHERE shop_domain = $1 AND status = 'CREDENTIAL_ERROR')`, shop).Scan(&bad)
	return !bad, err
}

// ShopDomains tells the shop domain of each of the stores ids that exists.
func (q Queries) ShopDomains(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]string, error) {
	rows, err := q.Pool.Query(ctx, `SELECT store_id, shop_domain FROM stores WHERE store_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]string, len(ids))
	var id uuid.UUID
	var domain string
	_, err = pgx.ForEachRow(rows, []any{&id, &domain}, func() error { out[id] = domain; return nil })
	return out, err
}
