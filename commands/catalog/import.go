package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Result tells what Import did.
type Result struct {
	// Published is false when once was set and the content was already published.
	Published bool
	// Events is how many events were published.
	Events int
	// Archived is how many of them archive a product the file no longer
	// lists (Options.ArchiveMissing).
	Archived int
	// Offsets is the highest acknowledged offset per partition; wait for the
	// projection to pass them (projections/catalog.WaitProjected) to read the
	// imported catalog back.
	Offsets map[int32]int64
}

// ErrForeignItems means the file names a store of another account, or a
// product or variant of another store or product: the projection would
// ignore those events, so nothing is published.
var ErrForeignItems = errors.New("the catalog file names items that belong elsewhere")

// Options are how Import treats a file.
type Options struct {
	// Once skips a file whose content was already published for the
	// account.
	Once bool
	// ArchiveMissing archives the products of the file's stores that the
	// catalog holds and the file does not list (those not ARCHIVED yet):
	// the file is then the whole catalog of its stores, and a product
	// renamed or dropped there stops being orderable. The catalog is read
	// as the projection has it.
	ArchiveMissing bool
}

// Import publishes f for account. The account must exist, and
// every store, product and variant of f must be new or already the same
// item of account (ErrForeignItems): the catalog projection ignores an
// upsert of another owner's item, so publishing it would report success
// for nothing.
func Import(ctx context.Context, pool *pgxpool.Pool, cl *kgo.Client, n schemas.Naming, account uuid.UUID, f File, opts Options, progress Progress) (Result, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE account_id = $1)`, account).Scan(&exists); err != nil {
		return Result{}, fmt.Errorf("find account: %w", err)
	}
	if !exists {
		return Result{}, fmt.Errorf("no account %s", account)
	}
	digest := Digest(f)
	if opts.ArchiveMissing {
		digest += "+archive" // the same file imported without archiving did less
	}
	if opts.Once {
		var done bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM catalog_loads WHERE account_id = $1 AND digest = $2)`,
			account, digest).Scan(&done); err != nil {
			return Result{}, fmt.Errorf("check catalog loads: %w", err)
		}
		if done {
			return Result{}, nil
		}
	}
	if err := checkOwners(ctx, pool, account, f); err != nil {
		return Result{}, err
	}
	now := time.Now()
	events, err := f.Events(account, now)
	if err != nil {
		return Result{}, err
	}
	var archived []Keyed
	if opts.ArchiveMissing {
		if archived, err = archiveMissing(ctx, pool, account, f, now); err != nil {
			return Result{}, err
		}
		events = append(events, archived...)
	}
	offsets, err := Publish(ctx, cl, n, events, progress)
	if err != nil {
		return Result{}, err
	}
	// Recorded after publishing: a crash in between publishes again, which is
	// harmless because every event states a whole item.
	if _, err := pool.Exec(ctx, `INSERT INTO catalog_loads (account_id, digest) VALUES ($1, $2)
		ON CONFLICT DO NOTHING`, account, digest); err != nil {
		return Result{}, fmt.Errorf("record catalog load: %w", err)
	}
	return Result{Published: true, Events: len(events), Archived: len(archived), Offsets: offsets}, nil
}

// archiveMissing is the events that archive the products of f's stores
// which the catalog holds, f does not list, and are not ARCHIVED yet: each
// the product as the catalog has it, variants included, in status
// ARCHIVED (an event states a whole product).
func archiveMissing(ctx context.Context, pool *pgxpool.Pool, account uuid.UUID, f File, now time.Time) ([]Keyed, error) {
	// Empty, not nil: pgx sends a nil slice as NULL, and "<> ALL(NULL)"
	// matches no product, so a store listed with none would archive none.
	stores, listed := []uuid.UUID{}, []uuid.UUID{}
	for _, s := range f.Stores {
		sid := s.id(account)
		stores = append(stores, sid)
		for _, p := range s.Products {
			listed = append(listed, p.id(sid))
		}
	}
	rows, err := pool.Query(ctx, `SELECT p.product_id, p.store_id, p.title, COALESCE(p.platform_id, ''), COALESCE(p.image_url, ''),
			COALESCE(v.variant_id, '00000000-0000-0000-0000-000000000000'), COALESCE(v.title, ''), COALESCE(v.sku, ''),
			COALESCE(v.price::text, ''), COALESCE(v.category, ''), COALESCE(v.requires_yarn_type, '{}'), COALESCE(v.image_url, '')
		FROM products p LEFT JOIN variants v ON v.product_id = p.product_id
		WHERE p.store_id = ANY($1) AND p.account_id = $2 AND p.product_id <> ALL($3) AND p.status <> 'ARCHIVED'
		ORDER BY p.store_id, p.product_id, v.position`, stores, account, listed)
	if err != nil {
		return nil, fmt.Errorf("find products the file no longer lists: %w", err)
	}
	var products []schemas.ProductUpserted
	var p schemas.ProductUpserted
	var v schemas.CatalogVariant
	_, err = pgx.ForEachRow(rows, []any{&p.ProductID, &p.StoreID, &p.Title, &p.PlatformID, &p.ImageURL,
		&v.VariantID, &v.Title, &v.SKU, &v.Price, &v.Category, &v.RequiresYarnType, &v.ImageURL}, func() error {
		if n := len(products); n == 0 || products[n-1].ProductID != p.ProductID {
			products = append(products, schemas.ProductUpserted{AccountID: account, StoreID: p.StoreID, ProductID: p.ProductID,
				Title: p.Title, Status: "ARCHIVED", PlatformID: p.PlatformID, ImageURL: p.ImageURL,
				Variants: []schemas.CatalogVariant{}, UpdatedAt: now})
		}
		if v.VariantID != uuid.Nil {
			last := &products[len(products)-1]
			v.RequiresYarnType = slices.Clone(v.RequiresYarnType)
			last.Variants = append(last.Variants, v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("find products the file no longer lists: %w", err)
	}
	out := make([]Keyed, 0, len(products))
	for _, p := range products {
		ev, err := schemas.NewEvent(schemas.TypeProductUpserted, now, p)
		if err != nil {
			return nil, err
		}
		out = append(out, Keyed{Key: p.StoreID, Event: ev})
	}
	return out, nil
}

// checkOwners refuses f when one of its items exists, in the catalog read
// model, under another owner: a store of another account, a product of
// another store, a variant of another product. Every such item is named,
// with its path in the file.
func checkOwners(ctx context.Context, pool *pgxpool.Pool, account uuid.UUID, f File) error {
	type item struct {
		path  string
		owner uuid.UUID // the account (store), store (product) or product (variant) f gives it
	}
	stores, products, variants := map[uuid.UUID]item{}, map[uuid.UUID]item{}, map[uuid.UUID]item{}
	for i, s := range f.Stores {
		sp := fmt.Sprintf("stores[%d]", i)
		sid := s.id(account)
		stores[sid] = item{sp, account}
		for j, p := range s.Products {
			pp := fmt.Sprintf("%s.products[%d]", sp, j)
			pid := p.id(sid)
			products[pid] = item{pp, sid}
			for k, v := range p.Variants {
				variants[v.id(pid)] = item{fmt.Sprintf("%s.variants[%d]", pp, k), pid}
			}
		}
	}
	var errs []error
	check := func(what, query string, items map[uuid.UUID]item, owner string) error {
		ids := make([]uuid.UUID, 0, len(items))
		for id := range items {
			ids = append(ids, id)
		}
		rows, err := pool.Query(ctx, query, ids)
		if err != nil {
			return fmt.Errorf("check %s owners: %w", what, err)
		}
		var id, has uuid.UUID
		_, err = pgx.ForEachRow(rows, []any{&id, &has}, func() error {
			if it := items[id]; has != it.owner {
				errs = append(errs, fmt.Errorf("%s: %s %s belongs to %s %s, not %s", it.path, what, id, owner, has, it.owner))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("check %s owners: %w", what, err)
		}
		return nil
	}
	if err := check("store", `SELECT store_id, account_id FROM stores WHERE store_id = ANY($1)`, stores, "account"); err != nil {
		return err
	}
	if err := check("product", `SELECT product_id, store_id FROM products WHERE product_id = ANY($1)`, products, "store"); err != nil {
		return err
	}
	if err := check("variant", `SELECT variant_id, product_id FROM variants WHERE variant_id = ANY($1)`, variants, "product"); err != nil {
		return err
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return fmt.Errorf("%w; nothing was imported:\n%w", ErrForeignItems, errors.Join(errs...))
	}
	return nil
}
