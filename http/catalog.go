package http

import (
	"errors"
	"slices"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/printpod/pod/commands/catalog"
	catalogrm "github.com/printpod/pod/projections/catalog"
)

func (s *Server) listStores(c *fiber.Ctx) error {
	limit, err := parseLimit(c)
	if err != nil {
		return err
	}
	var after catalogrm.StoreKey
	has, err := parseCursor(c, &after)
	if err != nil {
		return err
	}
	var afterp *catalogrm.StoreKey
	if has {
		afterp = &after
	}
	stores, more, err := s.Catalog.ListStores(c.UserContext(), accountOf(c), afterp, limit)
	if err != nil {
		return err
	}
	return c.JSON(page(stores, more, func(st catalogrm.Store) any {
		return catalogrm.StoreKey{Name: st.Name, ID: st.StoreID}
	}))
}

func (s *Server) listProducts(c *fiber.Ctx) error {
	store, err := pathUUID(c, "store_id")
	if err != nil {
		return err
	}
	limit, err := parseLimit(c)
	if err != nil {
		return err
	}
	q := catalogrm.ProductQuery{Q: c.Query("q"), SearchType: c.Query("search_type", catalogrm.SearchName), Status: c.Query("status"), Limit: limit}
	switch q.SearchType {
	case catalogrm.SearchName, catalogrm.SearchProductID, catalogrm.SearchPlatformID, catalogrm.SearchSKU:
	default:
		return Validation("search_type", "search_type must be one of name, product_id, platform_id, sku")
	}
	if q.Status != "" && !slices.Contains(catalog.ProductStatuses, q.Status) {
		return Validation("status", "status must be one of ACTIVE, ARCHIVED, DRAFT")
	}
	if q.SearchType == catalogrm.SearchSKU && q.Q != "" && utf8.RuneCountInString(q.Q) < 3 {
		return Validation("q", "q: SKU search requires at least 3 characters")
	}
	var after catalogrm.ProductKey
	has, err := parseCursor(c, &after)
	if err != nil {
		return err
	}
	if has {
		q.After = &after
	}
	products, more, err := s.Catalog.SearchProducts(c.UserContext(), accountOf(c), store, q)
	if errors.Is(err, catalogrm.ErrNotFound) {
		return NotFound("store")
	}
	if err != nil {
		return err
	}
	return c.JSON(page(products, more, func(p catalogrm.Product) any {
		return catalogrm.ProductKey{Title: p.Title, ID: p.ProductID}
	}))
}

func (s *Server) getProduct(c *fiber.Ctx) error {
	store, err := pathUUID(c, "store_id")
	if err != nil {
		return err
	}
	product, err := pathUUID(c, "product_id")
	if err != nil {
		return err
	}
	p, err := s.Catalog.GetProduct(c.UserContext(), accountOf(c), store, product)
	if errors.Is(err, catalogrm.ErrNotFound) {
		return NotFound("product")
	}
	if err != nil {
		return err
	}
	return c.JSON(p)
}
