package e2e

// Hostile input the first hostile suite missed: requests that slipped past
// the input rules by a second door (a cursor, a nested key in another case,
// a reference's ends, a UUID in another spelling).

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/commands/push"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/testenv"
	orderrm "github.com/printpod/pod/projections/order"
)

// refused checks that r is a 400 VALIDATION_ERROR naming field, and that
// the service still serves after it.
func refused(t *testing.T, d demoEnv, r testenv.Response, field string) {
	t.Helper()
	if r.Status != 400 {
		t.Fatalf("status %d, want 400: %s", r.Status, r.Body)
	}
	if e := r.Err(t); e.Error != "VALIDATION_ERROR" || e.Details["field"] != field {
		t.Fatalf("answer %s field %v, want VALIDATION_ERROR field %s: %s", e.Error, e.Details["field"], field, r.Body)
	}
	if s := d.client.Get("/v1/stores"); s.Status != 200 {
		t.Fatalf("service stopped serving after it: %d %s", s.Status, s.Body)
	}
}

// forgedCursor is the cursor a client could forge from the JSON of a
// keyset position.
func forgedCursor(position string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(position))
}

func TestAForgedCursorHoldingTextTheInputRulesRefuseIsAMalformedCursor(t *testing.T) {
	d := startDemo(t)
	products := "/v1/stores/" + d.store(t, "ACTIVE").StoreID.String() + "/products?cursor="
	const nilID = `"i":"00000000-0000-0000-0000-000000000000"`
	cases := []struct{ name, path string }{
		{"a store cursor whose name is a NUL", "/v1/stores?cursor=eyJuIjoiXHUwMDAwIiwiaSI6IjAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMCJ9"},
		{"a product cursor whose title is a NUL", products + "eyJ0IjoiXHUwMDAwIiwiaSI6IjAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMCJ9"},
		{"a store cursor whose name ends in a NUL", "/v1/stores?cursor=" + forgedCursor(`{"n":"Acme\u0000",`+nilID+`}`)},
		{"a product cursor whose title holds a NUL", products + forgedCursor(`{"t":"Tee\u0000shirt",`+nilID+`}`)},
		{"a store cursor whose name is invalid UTF-8", "/v1/stores?cursor=" + forgedCursor("{\"n\":\"\xff\","+nilID+"}")},
		{"a product cursor whose title is a lone surrogate", products + forgedCursor(`{"t":"\ud800",`+nilID+`}`)},
	}
	for _, c := range cases {
		t.Run(c.name+" is refused as a malformed cursor", func(t *testing.T) {
			refused(t, d, d.client.Get(c.path), "cursor")
		})
	}
	t.Run("a cursor the list issued still pages", func(t *testing.T) {
		first := d.products(t, d.store(t, "ACTIVE").StoreID, "?limit=1")
		if first.NextCursor == nil {
			t.Fatal("no second page: the demo store's products fit one page of one")
		}
		next := d.products(t, d.store(t, "ACTIVE").StoreID, "?limit=1&cursor="+*first.NextCursor)
		if len(next.Data) != 1 || next.Data[0].ProductID == first.Data[0].ProductID {
			t.Fatalf("the second page is %v after %v", titles(next.Data), titles(first.Data))
		}
	})
}

func TestAKeyThatDiffersFromAFieldOnlyByCaseIsAnUnknownField(t *testing.T) {
	d := startDemo(t)
	v := d.variant(t, "ACTIVE", "tshirt")
	other := d.variant(t, "ACTIVE", "hoodie")
	// body is a valid t-shirt order with the named member replaced by raw JSON.
	body := func(ref, member, raw string) []byte {
		b := tshirtOrder(v.VariantID, ref, 1)
		delete(b, member)
		encoded := mustJSON(t, b)
		return append(append(encoded[:len(encoded)-1], `,"`+member+`":`...), append([]byte(raw), '}')...)
	}
	const customer = `"first_name":"Ada","last_name":"Lovelace"`
	cases := []struct {
		name, path  string
		body        []byte
		field, want string
	}{
		{"a customer email given again in capitals", "/v1/orders/pod",
			body("case-1", "customer", `{"email":"a@b.co","EMAIL":"x@evil.co",`+customer+`}`),
			"customer.EMAIL", "unknown field customer.EMAIL"},
		{"a customer email only in another case", "/v1/orders/pod",
			body("case-2", "customer", `{"Email":"a@b.co",`+customer+`}`),
			"customer.Email", "unknown field customer.Email"},
		{"a shipping_address city in capitals", "/v1/orders/pod",
			body("case-3", "shipping_address", `{"address1":"1 Main St","CITY":"Austin","province":"TX","country_code":"US","zip":"78701"}`),
			"shipping_address.CITY", "unknown field shipping_address.CITY"},
		{"a line with variant_id and VARIANT_ID", "/v1/orders/pod",
			body("case-4", "line_items", `[{"variant_id":"`+v.VariantID.String()+`","VARIANT_ID":"`+other.VariantID.String()+`","quantity":1,"sides":{"front_side":"https://img.example.com/a.png"}}]`),
			"line_items[0].VARIANT_ID", "unknown field line_items[0].VARIANT_ID"},
		{"a line quantity in another case", "/v1/orders/pod",
			body("case-5", "line_items", `[{"variant_id":"`+v.VariantID.String()+`","Quantity":1,"sides":{"front_side":"https://img.example.com/a.png"}}]`),
			"line_items[0].Quantity", "unknown field line_items[0].Quantity"},
		{"a top-level reference_id in another case", "/v1/orders/pod",
			body("", "Reference_ID", `"case-6"`),
			"Reference_ID", "unknown field Reference_ID"},
		{"a batch of ORDERS", "/v1/orders/pod/batches",
			mustJSON(t, map[string]any{"ORDERS": []any{tshirtOrder(v.VariantID, "case-7", 1)}}),
			"ORDERS", `unknown field ORDERS: the body must be a JSON object {"orders": [create-order bodies]}`},
	}
	for _, c := range cases {
		t.Run(c.name+" is refused as an unknown field", func(t *testing.T) {
			r := d.client.Do("POST", c.path, c.body)
			refused(t, d, r, c.field)
			if e := r.Err(t); e.Message != c.want {
				t.Fatalf("message %q, want %q", e.Message, c.want)
			}
		})
	}
	t.Run("an order with every name in its own case is still created", func(t *testing.T) {
		if r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "case-ok", 1)); r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
	})
}

func TestAControlCharacterAtAnEndOfReferenceIDIsRefusedNotTrimmed(t *testing.T) {
	d := startDemo(t)
	v := d.variant(t, "ACTIVE", "tshirt")
	if r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "R-1", 1)); r.Status != 201 {
		t.Fatalf("create R-1: %d %s", r.Status, r.Body)
	}
	for _, c := range []struct{ name, ref string }{
		{"a trailing line feed", "R-1\n"},
		{"a leading tab", "\tR-1"},
		{"a trailing carriage return and line feed", "R-1\r\n"},
		{"a trailing next-line (U+0085)", "R-1\u0085"},
		{"a leading vertical tab", "\vR-2"},
	} {
		t.Run(c.name+" is refused on reference_id", func(t *testing.T) {
			body := with(tshirtOrder(v.VariantID, "R-x", 1), "reference_id", c.ref)
			body["force"] = true
			refused(t, d, d.client.Do("POST", "/v1/orders/pod", body), "reference_id")
		})
	}
	t.Run("surrounding spaces are still trimmed", func(t *testing.T) {
		r := d.client.Do("POST", "/v1/orders/pod", with(tshirtOrder(v.VariantID, "R-3", 1), "reference_id", "  R-3  "))
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		var o struct {
			ReferenceID string `json:"reference_id"`
		}
		if r.JSON(t, &o); o.ReferenceID != "R-3" {
			t.Fatalf("reference_id %q, want R-3", o.ReferenceID)
		}
	})
}

func TestReferenceIDIsLimitedTo100CharactersNot100Bytes(t *testing.T) {
	d := startDemo(t)
	v := d.variant(t, "ACTIVE", "tshirt")
	order := func(ref string) map[string]any {
		return with(with(tshirtOrder(v.VariantID, "len", 1), "reference_id", ref), "force", true)
	}
	for _, c := range []struct{ name, ref string }{
		{"40 CJK characters (120 bytes)", strings.Repeat("注", 40)},
		{"100 CJK characters (300 bytes)", strings.Repeat("订", 100)},
		{"100 emoji (400 bytes)", strings.Repeat("😀", 100)},
	} {
		t.Run(c.name+" are a reference", func(t *testing.T) {
			r := d.client.Do("POST", "/v1/orders/pod", order(c.ref))
			if r.Status != 201 {
				t.Fatalf("create: %d %s", r.Status, r.Body)
			}
			var o struct {
				ReferenceID string `json:"reference_id"`
			}
			if r.JSON(t, &o); o.ReferenceID != c.ref {
				t.Fatalf("reference_id %q, want %q", o.ReferenceID, c.ref)
			}
		})
	}
	t.Run("101 CJK characters are refused", func(t *testing.T) {
		r := d.client.Do("POST", "/v1/orders/pod", order(strings.Repeat("注", 101)))
		refused(t, d, r, "reference_id")
		if e := r.Err(t); e.Message != "reference_id must be at most 100 characters" {
			t.Fatalf("message %q", e.Message)
		}
	})
}

func TestAUUIDInAnyButItsCanonicalFormIsMalformed(t *testing.T) {
	rc := newReceiver(t)
	d := startDemo(t, allow(rc))
	v := d.variant(t, "ACTIVE", "tshirt")
	st := d.store(t, "ACTIVE").StoreID.String()
	product := firstProduct(t, d, d.store(t, "ACTIVE").StoreID)
	r := d.client.Do("POST", "/v1/orders/pod", tshirtOrder(v.VariantID, "uuid-forms", 1))
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var o struct {
		OrderID uuid.UUID `json:"order_id"`
	}
	r.JSON(t, &o)
	hook := createWebhook(t, d.client, rc.url("/uuid"))
	id := o.OrderID.String()
	// The other spellings uuid.Parse takes of one id.
	urn := func(s string) string { return "urn:uuid:" + s }
	braced := func(s string) string { return "%7B" + s + "%7D" }
	bare := func(s string) string { return strings.ReplaceAll(s, "-", "") }

	paths := []struct{ name, path, field string }{
		{"an order id as a URN", "/v1/orders/pod/" + urn(id), "order_id"},
		{"an order id in braces", "/v1/orders/pod/" + braced(id), "order_id"},
		{"an order id of 32 bare hex digits", "/v1/orders/pod/" + bare(id), "order_id"},
		{"an order id as a URN on its queue", "/v1/orders/pod/" + urn(id) + "/queue", "order_id"},
		{"a store id as a URN", "/v1/stores/" + urn(st) + "/products", "store_id"},
		{"a store id of 32 bare hex digits", "/v1/stores/" + bare(st) + "/products/" + product, "store_id"},
		{"a product id as a URN", "/v1/stores/" + st + "/products/" + urn(product), "product_id"},
		{"a webhook id of 32 bare hex digits", "/v1/me/webhooks/" + bare(hook.ID.String()), "id"},
		{"a delivery id as a URN", "/v1/me/webhooks/" + hook.ID.String() + "/deliveries/" + urn(uuid.NewString()), "delivery_id"},
		{"a batch id in braces", "/v1/orders/pod/batches/" + braced(uuid.NewString()), "batch_id"},
		{"a batch id of 32 bare hex digits", "/v1/orders/pod/batches/" + bare(uuid.NewString()), "batch_id"},
	}
	for _, c := range paths {
		t.Run(c.name+" is a malformed "+c.field, func(t *testing.T) {
			refused(t, d, d.client.Get(c.path), c.field)
		})
	}
	t.Run("a cursor whose id is a URN is a malformed cursor", func(t *testing.T) {
		refused(t, d, d.client.Get("/v1/stores?cursor="+forgedCursor(`{"n":"Acme","i":"`+urn(st)+`"}`)), "cursor")
	})
	t.Run("a cancel of an order id as a URN is a malformed order_id", func(t *testing.T) {
		refused(t, d, d.client.Do("POST", "/v1/orders/pod/"+urn(id)+"/cancel", nil), "order_id")
	})
	for _, c := range []struct{ name, variant string }{
		{"as a URN", urn(v.VariantID.String())},
		{"in braces", "{" + v.VariantID.String() + "}"},
		{"of 32 bare hex digits", bare(v.VariantID.String())},
	} {
		t.Run("a variant_id "+c.name+" is a malformed variant_id", func(t *testing.T) {
			body := with(tshirtOrder(v.VariantID, "uuid-variant", 1), "line_items.0.variant_id", c.variant)
			refused(t, d, d.client.Do("POST", "/v1/orders/pod", body), "line_items[0].variant_id")
		})
	}
	t.Run("a product_id search for a URN finds no product", func(t *testing.T) {
		if p := d.products(t, d.store(t, "ACTIVE").StoreID, q("search_type", "product_id", "q", urn(product))); len(p.Data) != 0 {
			t.Fatalf("found %v", titles(p.Data))
		}
	})
	t.Run("the canonical form in capitals is still the id", func(t *testing.T) {
		if r := d.client.Get("/v1/orders/pod/" + strings.ToUpper(id)); r.Status != 200 {
			t.Fatalf("GET: %d %s", r.Status, r.Body)
		}
		if p := d.products(t, d.store(t, "ACTIVE").StoreID, q("search_type", "product_id", "q", strings.ToUpper(product))); len(p.Data) != 1 {
			t.Fatalf("found %v", titles(p.Data))
		}
	})
}

// TestAPlatformAnswerPostgresCannotStoreFailsThePushAndStallsNothing
// pushes to a store platform that answers one order with a NUL in the id
// it gives it, and refuses another with a NUL and control characters in
// its error: neither text reaches a stage, both orders end FAILED with a
// readable error, nothing is dead-lettered, and the next order is pushed.
func TestAPlatformAnswerPostgresCannotStoreFailsThePushAndStallsNothing(t *testing.T) {
	sim := push.NewSimulator(func(context.Context, string) (bool, error) { return true, nil })
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case bytes.Contains(body, []byte("platform-nul-id")):
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"ord\u0000nul","number":"#1"}`)
		case bytes.Contains(body, []byte("platform-nul-error")):
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"error":"bad\u0000order","message":"line\u0000one\u001b[1m\nline two"}`)
		default:
			r.Body = io.NopCloser(bytes.NewReader(body))
			sim.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(platform.Close)
	d := startDemo(t, fastPushes, func(c *config.Config) { c.PlatformURL = platform.URL })
	v := d.variant(t, "ACTIVE", "tshirt")

	for ref, want := range map[string]string{
		"platform-nul-id":    "unreadable success response",
		"platform-nul-error": "status 422: line one [1m line two",
	} {
		o := d.waitStatus(t, d.client, create(t, d.client, tshirtOrder(v.VariantID, ref, 1)).OrderID, "FAILED")
		var errs []string
		for _, a := range o.DeliveryAttempts {
			if a.Error != nil {
				errs = append(errs, *a.Error)
			}
		}
		if len(errs) == 0 || !strings.Contains(errs[len(errs)-1], want) {
			t.Errorf("%s: the attempts' errors are %q, want the last to say %q", ref, errs, want)
		}
	}
	if n := deadLetterCounts(t, d)[orderrm.ConsumerName]; n != 0 {
		t.Fatalf("the order projector dead-lettered %v records", n)
	}
	d.waitStatus(t, d.client, create(t, d.client, tshirtOrder(v.VariantID, "platform-after", 1)).OrderID, "SUCCESS")
}

// A shop that never answers, with more pushes due than a worker holds,
// keeps no other store's push waiting for its calls to end. Found by
// review: the worker held the oldest due pushes, all the hanging shop's,
// and claimed nothing more until their calls timed out, 12 at a time, each
// after 4 tries of 10 s.
func TestAShopThatNeverAnswersHoldsUpNoOtherStoresPush(t *testing.T) {
	t.Run("its pushes claimed as they come", func(t *testing.T) { hangingShop(t, false) })
	t.Run("its pushes all due when the worker starts", func(t *testing.T) { hangingShop(t, true) })
}

// hangingShop creates more orders of a shop that never answers than a
// worker holds, then one of another store, and waits for that one to be
// pushed. late starts the push worker only after the orders are created,
// so its first claims take the hanging shop's pushes alone.
func hangingShop(t *testing.T, late bool) {
	sim := push.NewSimulator(nil)
	var hangs atomic.Pointer[string] // the path prefix of the shop that never answers
	var hanging atomic.Int64
	answer := make(chan struct{})
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := hangs.Load(); p != nil && strings.HasPrefix(r.URL.Path, *p) {
			hanging.Add(1)
			defer hanging.Add(-1)
			select {
			case <-r.Context().Done():
			case <-answer:
			}
			return
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(platform.Close)
	t.Cleanup(func() { close(answer) }) // before the platform closes: it waits for its handlers
	d := startDemo(t, func(c *config.Config) {
		c.PlatformURL = platform.URL
		if late {
			c.Roles = slices.DeleteFunc(slices.Clone(config.AllRoles), func(r string) bool { return r == config.RolePusher })
		}
	})
	sh := newShelf(t, d)
	prefix := "/shops/" + sh.domain + "/"
	hangs.Store(&prefix)

	const backlog = 300 // more than a worker holds: claimSize and four per caller
	for i := range backlog {
		create(t, sh.client, tshirtOrder(sh.variant, fmt.Sprintf("hangs-%d", i), 1))
	}
	v := d.variant(t, "ACTIVE", "tshirt")
	beside := create(t, d.client, tshirtOrder(v.VariantID, "beside-a-hanging-shop", 1))
	if late {
		d.startPeer(t, func(c *config.Config) { c.Roles = []string{config.RolePusher} })
	}
	// The hanging shop counts as slow once none of its calls has ended
	// for 10 s; then the worker gives back what it holds beyond what its
	// calls can start, and claims the other store's push. Before, the
	// other store's push waited for the hanging calls to end, minutes.
	testenv.Eventually(t, time.Minute, func() error {
		if o := d.detail(t, d.client, beside.OrderID); o.Status != "SUCCESS" {
			return fmt.Errorf("the other store's order is %s", o.Status)
		}
		return nil
	})
	if n := hanging.Load(); n == 0 {
		t.Fatal("no call of the shop that never answers was under way")
	}
}
