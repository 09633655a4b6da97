package catalog

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/testenv"
)

// seedLarge fills a fresh database with one account's store of n products,
// three variants each, written straight into the read model.
func seedLarge(tb testing.TB, n int) (*pgxpool.Pool, uuid.UUID, uuid.UUID) {
	tb.Helper()
	ctx := context.Background()
	pool, err := pg.Open(ctx, testenv.NewDatabase(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	account, store := uuid.New(), uuid.New()
	stmts := []string{
		`INSERT INTO stores (store_id, account_id, name, shop_domain, status, updated_at) VALUES ($1, $2, 'Big', 'big.example', 'ACTIVE', now())`,
		`INSERT INTO products (product_id, store_id, account_id, title, status, platform_id, updated_at)
		 SELECT gen_random_uuid(), $1, $2,
		        (ARRAY['Classic','Vintage','Retro','Modern','Cozy','Bold'])[1 + i % 6] || ' ' ||
		        (ARRAY['Hoodie','Tee','Cap','Tote','Sweatshirt','Hat'])[1 + (i / 6) % 6] || ' ' || i,
		        (ARRAY['ACTIVE','ACTIVE','ACTIVE','ARCHIVED','DRAFT'])[1 + i % 5], 'plat-' || i, now()
		 FROM generate_series(1, $3::int) AS i`,
		`INSERT INTO variants (variant_id, product_id, store_id, account_id, position, title, sku, price, category)
		 SELECT gen_random_uuid(), p.product_id, p.store_id, p.account_id, v, 'V' || v,
		        'SKU-' || substr(md5(p.product_id::text), 1, 8) || '-' || v, 19.90, 'tshirt'
		 FROM products p CROSS JOIN generate_series(1, 3) AS v WHERE p.store_id = $1`,
		`ANALYZE stores, products, variants`,
	}
	args := [][]any{{store, account}, {store, account, n}, {store}, nil}
	for i, s := range stmts {
		if _, err := pool.Exec(ctx, s, args[i]...); err != nil {
			tb.Fatalf("seed: %v", err)
		}
	}
	return pool, account, store
}

// BenchmarkSearch100k measures each search type on a store of 100,000 products.
//
//	go test -run '^$' -bench Search100k -benchtime 200x ./projections/catalog/
func BenchmarkSearch100k(b *testing.B) {
	pool, account, store := seedLarge(b, 100_000)
	q := Queries{Pool: pool}
	var someSKU string
	if err := pool.QueryRow(context.Background(), `SELECT sku FROM variants OFFSET 50000 LIMIT 1`).Scan(&someSKU); err != nil {
		b.Fatal(err)
	}
	var someID uuid.UUID
	_ = pool.QueryRow(context.Background(), `SELECT product_id FROM products OFFSET 70000 LIMIT 1`).Scan(&someID)
	cases := []ProductQuery{
		{Limit: 20},
		{Status: "DRAFT", Limit: 20},
		{Q: "vintage hoodie 99", Limit: 20},
		{Q: "cap 4242", Limit: 100},
		{Q: "zzz-no-match", Limit: 20},
		{Q: someSKU[4:10], SearchType: SearchSKU, Limit: 20},
		{Q: "plat-77777", SearchType: SearchPlatformID, Limit: 20},
		{Q: someID.String(), SearchType: SearchProductID, Limit: 20},
		{After: &ProductKey{Title: "Retro", ID: uuid.Nil}, Limit: 100},
	}
	for _, pq := range cases {
		name := fmt.Sprintf("type=%s/q=%s/status=%s/after=%v", pq.SearchType, strings.ReplaceAll(pq.Q, " ", "_"), pq.Status, pq.After != nil)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, _, err := q.SearchProducts(context.Background(), account, store, pq); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSearchesUseIndexesAt100k checks the plans of the partial-match searches
// on 100,000 products: each reads through an index, never a full scan of the
// products or variants table.
func TestSearchesUseIndexesAt100k(t *testing.T) {
	pool, _, store := seedLarge(t, 100_000)
	ctx := context.Background()
	plans := map[string]string{
		"name": `SELECT p.product_id FROM products p WHERE p.store_id = $1 AND p.title ILIKE '%vintage hoodie 99%' ORDER BY p.title, p.product_id LIMIT 21`,
		"sku": `SELECT p.product_id FROM products p WHERE p.store_id = $1 AND p.product_id IN
			(SELECT v.product_id FROM variants v WHERE v.store_id = $1 AND v.sku ILIKE '%a1b2c3%') ORDER BY p.title, p.product_id LIMIT 21`,
		"page": `SELECT p.product_id FROM products p WHERE p.store_id = $1 AND (p.title, p.product_id) > ('Retro', '00000000-0000-0000-0000-000000000000') ORDER BY p.title, p.product_id LIMIT 101`,
	}
	for name, sql := range plans {
		rows, err := pool.Query(ctx, "EXPLAIN "+sql, store)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for rows.Next() {
			var l string
			_ = rows.Scan(&l)
			lines = append(lines, l)
		}
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s search scans a whole table:\n%s", name, plan)
		}
	}
}
