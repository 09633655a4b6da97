package e2e

// Hostile input the first hostile suite missed: requests that slipped past
// the input rules by a second door (a cursor, a nested key in another case,
// a reference's ends, a UUID in another spelling).

import (
	"encoding/base64"
	"testing"

	"github.com/printpod/pod/internal/testenv"
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
			t.Skip("the demo store has one product")
		}
		next := d.products(t, d.store(t, "ACTIVE").StoreID, "?limit=1&cursor="+*first.NextCursor)
		if len(next.Data) != 1 || next.Data[0].ProductID == first.Data[0].ProductID {
			t.Fatalf("the second page is %v after %v", titles(next.Data), titles(first.Data))
		}
	})
}
