package e2e

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/testenv"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
)

type olPage struct {
	Data       []orderrm.Order `json:"data"`
	NextCursor *string         `json:"next_cursor"`
}

// olList gets one page of GET /v1/orders/pod with the query (without "?").
func olList(t *testing.T, c *testenv.Client, query string) olPage {
	t.Helper()
	path := "/v1/orders/pod"
	if query != "" {
		path += "?" + query
	}
	r := c.Get(path)
	if r.Status != 200 {
		t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
	}
	var p olPage
	r.JSON(t, &p)
	if p.Data == nil {
		t.Fatalf("GET %s: data is not an array: %s", path, r.Body)
	}
	return p
}

// olWalk follows next_cursor from the first page of query to the end and
// returns the ids in order and the number of pages.
func olWalk(t *testing.T, c *testenv.Client, query string) ([]uuid.UUID, int) {
	t.Helper()
	var ids []uuid.UUID
	cursor, pages := "", 0
	for {
		qq := query
		if cursor != "" {
			qq += "&cursor=" + cursor
		}
		p := olList(t, c, qq)
		pages++
		for _, o := range p.Data {
			ids = append(ids, o.OrderID)
		}
		if p.NextCursor == nil {
			return ids, pages
		}
		if len(p.Data) == 0 || pages > 1000 {
			t.Fatalf("%s: page %d is empty but has a next_cursor", query, pages)
		}
		cursor = *p.NextCursor
	}
}

// olCreate creates an order and returns it as the read model holds it.
func olCreate(t *testing.T, d demoEnv, body any) orderrm.Order {
	t.Helper()
	return d.detail(t, d.client, create(t, d.client, body).OrderID).Order
}

func olIDs(os []orderrm.Order) []uuid.UUID {
	out := make([]uuid.UUID, len(os))
	for i, o := range os {
		out[i] = o.OrderID
	}
	return out
}

// olCheckNewestFirst checks the keyset order: created_at descending, then
// order_id descending.
func olCheckNewestFirst(t *testing.T, os []orderrm.Order) {
	t.Helper()
	for i := 1; i < len(os); i++ {
		a, b := os[i-1], os[i]
		if a.CreatedAt.Before(b.CreatedAt) || a.CreatedAt.Equal(b.CreatedAt) && a.OrderID.String() <= b.OrderID.String() {
			t.Fatalf("not newest first at %d: %s %s then %s %s", i, a.CreatedAt, a.OrderID, b.CreatedAt, b.OrderID)
		}
	}
}

// olNewest orders the created orders as the list must: created_at
// descending, then order_id descending (created_at has a finite precision,
// so two orders may share one). It also checks that creation order and
// created_at agree.
func olNewest(t *testing.T, created []orderrm.Order) []uuid.UUID {
	t.Helper()
	for i := 1; i < len(created); i++ {
		if created[i].CreatedAt.Before(created[i-1].CreatedAt) {
			t.Fatalf("order %s was created after %s but has an earlier created_at (%s < %s)",
				created[i].OrderID, created[i-1].OrderID, created[i].CreatedAt, created[i-1].CreatedAt)
		}
	}
	s := slices.Clone(created)
	slices.SortFunc(s, func(a, b orderrm.Order) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.OrderID.String(), a.OrderID.String())
	})
	return olIDs(s)
}

func olBadRequest(t *testing.T, c *testenv.Client, path, field string) {
	t.Helper()
	r := c.Get(path)
	if r.Status != 400 {
		t.Errorf("GET %s: %d %s, want 400", path, r.Status, r.Body)
		return
	}
	e := r.Err(t)
	if e.Error != schemas.CodeValidation || e.Details["field"] != field {
		t.Errorf("GET %s: %s field %v, want %s field %s: %s", path, e.Error, e.Details["field"], schemas.CodeValidation, field, r.Body)
	}
}

func TestOrderListOverHTTP(t *testing.T) {
	d := startDemo(t, noPusher)
	c := d.client
	v := d.variant(t, "ACTIVE", "tshirt")
	const n = 25
	var created []orderrm.Order // in creation order
	for i := range n {
		created = append(created, olCreate(t, d, tshirtOrder(v.VariantID, fmt.Sprintf("list-%02d", i), 1)))
	}
	newest := olNewest(t, created)

	t.Run("default page", func(t *testing.T) {
		p := olList(t, c, "")
		if len(p.Data) != 20 || p.NextCursor == nil {
			t.Fatalf("default page: %d orders, next_cursor %v; want 20 and a cursor", len(p.Data), p.NextCursor)
		}
		if got := olIDs(p.Data); !slices.Equal(got, newest[:20]) {
			t.Fatalf("default page is not the 20 newest orders, newest first:\n got %v\nwant %v", got, newest[:20])
		}
		olCheckNewestFirst(t, p.Data)
		for _, o := range p.Data {
			if o.CreatedVia != "api" || o.Status != "PENDING" || o.CreatedAt.IsZero() || o.AddonService == nil || len(o.Pricing) == 0 {
				t.Fatalf("list item: %+v", o)
			}
		}
	})

	t.Run("limit", func(t *testing.T) {
		for _, limit := range []int{1, 2, 7, 20, 24, 25, 26, 100} {
			p := olList(t, c, "limit="+strconv.Itoa(limit))
			want := min(limit, n)
			if len(p.Data) != want || (p.NextCursor != nil) != (limit < n) {
				t.Errorf("limit %d: %d orders, next_cursor %v", limit, len(p.Data), p.NextCursor)
				continue
			}
			if !slices.Equal(olIDs(p.Data), newest[:want]) {
				t.Errorf("limit %d: not the newest orders in order", limit)
			}
		}
		for _, bad := range []string{"0", "101", "abc", "-1", "1.5", "1e1", "20abc"} {
			olBadRequest(t, c, "/v1/orders/pod?limit="+bad, "limit")
		}
	})

	t.Run("malformed cursor", func(t *testing.T) {
		enc := base64.RawURLEncoding.EncodeToString
		for _, bad := range []string{"!!!", "abc", "not-a-cursor", enc([]byte("not json")), enc([]byte(`[1,2]`)),
			enc([]byte(`{"c":"yesterday","i":"x"}`)), enc([]byte(`{"c":"2026-01-01T00:00:00Z","i":"not-a-uuid"}`))} {
			olBadRequest(t, c, "/v1/orders/pod"+q("cursor", bad), "cursor")
		}
		// A good cursor with a bad limit is still a bad request.
		first := olList(t, c, "limit=3")
		olBadRequest(t, c, "/v1/orders/pod"+q("cursor", *first.NextCursor, "limit", "0"), "limit")
	})

	t.Run("cursor with no order position", func(t *testing.T) {
		enc := base64.RawURLEncoding.EncodeToString
		// A cursor of another list (products) is not an order cursor.
		st := d.store(t, "ACTIVE")
		products := d.products(t, st.StoreID, "?limit=1")
		if products.NextCursor == nil {
			t.Fatal("no product cursor")
		}
		// Cursors that decode as JSON but hold no order position: a
		// client must not get an empty page that looks like the end.
		for _, bad := range []string{enc([]byte("null")), enc([]byte("{}")), *products.NextCursor} {
			olBadRequest(t, c, "/v1/orders/pod"+q("cursor", bad), "cursor")
		}
	})

	t.Run("paging is stable under inserts", func(t *testing.T) {
		var seen []uuid.UUID
		var inserted []uuid.UUID
		before := slices.Clone(newest)
		cursor, pages := "", 0
		for {
			query := "limit=7"
			if cursor != "" {
				query += "&cursor=" + cursor
			}
			p := olList(t, c, query)
			pages++
			if len(p.Data) > 7 {
				t.Fatalf("page %d has %d orders", pages, len(p.Data))
			}
			olCheckNewestFirst(t, p.Data)
			seen = append(seen, olIDs(p.Data)...)
			if p.NextCursor == nil {
				break
			}
			cursor = *p.NextCursor
			// New orders arrive between pages: two after the first, one after the second.
			for j := range max(0, 3-pages) {
				ref := fmt.Sprintf("list-new-%d-%d", pages, j)
				o := olCreate(t, d, tshirtOrder(v.VariantID, ref, 1))
				created = append(created, o)
				inserted = append(inserted, o.OrderID)
			}
		}
		if pages != 4 {
			t.Errorf("%d pages of 7 for %d orders, want 4", pages, n)
		}
		if len(inserted) != 3 {
			t.Fatalf("inserted %d orders between pages, want 3", len(inserted))
		}
		if !slices.Equal(seen, before) {
			t.Fatalf("the walk did not visit every order once, newest first:\n got %v\nwant %v", seen, before)
		}
		// A new walk sees everything; the inserted orders come first.
		newest = olNewest(t, created)
		all, _ := olWalk(t, c, "limit=7")
		if !slices.Equal(all, newest) {
			t.Fatalf("a fresh walk:\n got %v\nwant %v", all, newest)
		}
		for _, id := range inserted {
			if !slices.Contains(all[:len(inserted)], id) {
				t.Fatalf("inserted order %s is not among the newest", id)
			}
		}
	})
	total := len(newest)

	t.Run("status filter", func(t *testing.T) {
		var cancelled []uuid.UUID // newest first
		for _, i := range []int{3, 11, 20} {
			id := newest[i]
			r := c.Do("POST", "/v1/orders/pod/"+id.String()+"/cancel", nil)
			var o orderrm.Order
			r.JSON(t, &o)
			if r.Status != 200 || o.Status != "CANCELLED" {
				t.Fatalf("cancel %s: %d %s", id, r.Status, r.Body)
			}
			cancelled = append(cancelled, id)
		}
		p := olList(t, c, "status=CANCELLED")
		if !slices.Equal(olIDs(p.Data), cancelled) || p.NextCursor != nil {
			t.Fatalf("status=CANCELLED: %v (next %v), want %v", olIDs(p.Data), p.NextCursor, cancelled)
		}
		for _, o := range p.Data {
			if o.Status != "CANCELLED" || o.QueuePosition != nil {
				t.Fatalf("cancelled list item: %+v", o)
			}
		}
		// Paged, the filter holds on every page.
		ids, pages := olWalk(t, c, "status=CANCELLED&limit=2")
		if !slices.Equal(ids, cancelled) || pages != 2 {
			t.Fatalf("status=CANCELLED&limit=2: %v in %d pages", ids, pages)
		}
		pending, _ := olWalk(t, c, "status=PENDING&limit=10")
		wantPending := slices.DeleteFunc(slices.Clone(newest), func(id uuid.UUID) bool { return slices.Contains(cancelled, id) })
		if !slices.Equal(pending, wantPending) {
			t.Fatalf("status=PENDING: %d orders, want %d", len(pending), len(wantPending))
		}
		// Cancelling keeps an order's place in the unfiltered list.
		if all, _ := olWalk(t, c, "limit=100"); !slices.Equal(all, newest) {
			t.Fatalf("unfiltered list changed after cancels")
		}
		for _, s := range []string{"PROCESSING", "SUCCESS", "SYNCED", "FULFILLED", "FAILED"} {
			if p := olList(t, c, "status="+s); len(p.Data) != 0 || p.NextCursor != nil {
				t.Errorf("status=%s lists %d orders", s, len(p.Data))
			}
		}
		for _, bad := range []string{"SHIPPED", "QUEUED", "PENDING,CANCELLED", "unknown"} {
			olBadRequest(t, c, "/v1/orders/pod"+q("status", bad), "status")
		}
	})

	t.Run("from and to", func(t *testing.T) {
		all := olList(t, c, "limit=100").Data
		if len(all) != total {
			t.Fatalf("%d orders listed, want %d", len(all), total)
		}
		olCheckNewestFirst(t, all)
		within := func(from, to *time.Time, status string) []uuid.UUID {
			out := []uuid.UUID{}
			for _, o := range all {
				if (from == nil || !o.CreatedAt.Before(*from)) && (to == nil || o.CreatedAt.Before(*to)) &&
					(status == "" || o.Status == status) {
					out = append(out, o.OrderID)
				}
			}
			return out
		}
		from, to := all[22].CreatedAt, all[5].CreatedAt
		ts := func(x time.Time) string { return x.Format(time.RFC3339Nano) }
		check := func(name string, query string, want []uuid.UUID) {
			t.Helper()
			got, _ := olWalk(t, c, query)
			if got == nil {
				got = []uuid.UUID{}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s (%s):\n got %v\nwant %v", name, query, got, want)
			}
		}
		window := within(&from, &to, "")
		if len(window) < 10 || !slices.Contains(window, all[22].OrderID) || slices.Contains(window, all[5].OrderID) {
			t.Fatalf("test setup: window %v", window)
		}
		check("from inclusive, to exclusive", q("from", ts(from), "to", ts(to))[1:], window)
		check("from only", q("from", ts(from))[1:], within(&from, nil, ""))
		check("to only", q("to", ts(to))[1:], within(nil, &to, ""))
		check("window, paged by 4", q("from", ts(from), "to", ts(to), "limit", "4")[1:], window)
		east := time.FixedZone("UTC+2", 2*3600)
		check("window written with another offset", q("from", ts(from.In(east)), "to", ts(to.In(east)))[1:], window)
		// Sent unescaped, the offset's "+" arrives as a space.
		check("window with the offset's + unescaped", "from="+ts(from.In(east))+"&to="+ts(to.In(east)), window)
		check("from equals to", q("from", ts(from), "to", ts(from))[1:], []uuid.UUID{})
		newestAt, oldestAt := all[0].CreatedAt, all[len(all)-1].CreatedAt
		check("from is the newest order", q("from", ts(newestAt))[1:], within(&newestAt, nil, ""))
		check("to is the oldest order", q("to", ts(oldestAt))[1:], within(nil, &oldestAt, ""))
		if !slices.Contains(within(&newestAt, nil, ""), all[0].OrderID) || len(within(nil, &oldestAt, "")) != 0 {
			t.Fatalf("test setup: bounds")
		}
		check("window and status", q("from", ts(from), "to", ts(to), "status", "CANCELLED")[1:], within(&from, &to, "CANCELLED"))
		if len(within(&from, &to, "CANCELLED")) == 0 {
			t.Errorf("test setup: no cancelled order in the window")
		}
		for _, bad := range []string{"not-a-date", "2026-13-45T00:00:00Z", "2026-01-01T25:00:00Z"} {
			olBadRequest(t, c, "/v1/orders/pod"+q("from", bad), "from")
			olBadRequest(t, c, "/v1/orders/pod"+q("to", bad), "to")
		}
	})

	t.Run("detail of an unknown or malformed id", func(t *testing.T) {
		r := c.Get("/v1/orders/pod/" + uuid.NewString())
		if r.Status != 404 || r.Err(t).Error != schemas.CodeNotFound {
			t.Errorf("unknown order: %d %s", r.Status, r.Body)
		}
		for _, bad := range []string{"not-a-uuid", "123", created[0].OrderID.String() + "0"} {
			olBadRequest(t, c, "/v1/orders/pod/"+bad, "order_id")
		}
		// A known id still answers.
		if o := d.detail(t, c, created[0].OrderID); o.OrderID != created[0].OrderID || o.ReferenceID != "list-00" {
			t.Errorf("detail of %s: %+v", created[0].OrderID, o.Order)
		}
	})
}
