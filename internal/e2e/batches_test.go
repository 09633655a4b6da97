package e2e

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
)

type batchStatus struct {
	BatchID   uuid.UUID `json:"batch_id"`
	Status    string    `json:"status"`
	Total     int       `json:"total"`
	Processed int       `json:"processed"`
	Succeeded int       `json:"succeeded"`
	Failed    int       `json:"failed"`
	Items     []struct {
		Index      int             `json:"index"`
		Status     string          `json:"status"`
		HTTPStatus *int            `json:"http_status"`
		OrderID    *uuid.UUID      `json:"order_id"`
		Error      json.RawMessage `json:"error"`
	} `json:"items"`
}

func TestBatchIntake(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	hoodie := d.variant(t, "ACTIVE", "hoodie")

	t.Run("bad batches are refused whole", func(t *testing.T) {
		many := make([]any, 1001)
		for i := range many {
			many[i] = map[string]any{}
		}
		for _, c := range []struct {
			name  string
			body  any
			field string
		}{
			{"not an object", []any{}, ""},
			{"no orders", map[string]any{"orders": []any{}}, "orders"},
			{"too many", map[string]any{"orders": many}, "orders"},
			{"an item is not an object", map[string]any{"orders": []any{map[string]any{}, "x"}}, "orders[1]"},
			{"unknown field", map[string]any{"orders": []any{map[string]any{}}, "extra": 1}, ""},
		} {
			r := d.client.Do("POST", "/v1/orders/pod/batches", c.body)
			e := r.Err(t)
			if r.Status != 400 || e.Error != schemas.CodeValidation || (c.field != "" && e.Details["field"] != c.field) {
				t.Errorf("%s: %d %s", c.name, r.Status, r.Body)
			}
		}
	})

	invalid := tshirtOrder(hoodie.VariantID, "batch-bad", 1) // hoodie without its yarn_type
	single := d.client.Do("POST", "/v1/orders/pod", invalid)
	if single.Status != 400 {
		t.Fatalf("single invalid create: %d %s", single.Status, single.Body)
	}
	orders := []any{
		tshirtOrder(v.VariantID, "batch-0", 1),
		tshirtOrder(v.VariantID, "batch-1", 2),
		invalid,
		tshirtOrder(v.VariantID, "batch-0", 3), // same reference as item 0
		tshirtOrder(v.VariantID, "", 4),        // reference generated
	}
	r := d.client.Do("POST", "/v1/orders/pod/batches", map[string]any{"orders": orders})
	if r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	var st batchStatus
	r.JSON(t, &st)
	if st.BatchID == uuid.Nil || st.Total != len(orders) {
		t.Fatalf("batch accepted: %s", r.Body)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		d.client.Get("/v1/orders/pod/batches/"+st.BatchID.String()).JSON(t, &st)
		if st.Status != "completed" {
			return fmt.Errorf("batch %s: %d/%d", st.Status, st.Processed, st.Total)
		}
		return nil
	})
	if st.Succeeded != 3 || st.Failed != 2 || len(st.Items) != 5 {
		t.Fatalf("batch result: %+v", st)
	}
	// Items 0 and 3 share a reference: exactly one of them won.
	won := 0
	for _, i := range []int{0, 3} {
		it := st.Items[i]
		switch it.Status {
		case "created":
			won++
		case "failed":
			if *it.HTTPStatus != 409 || !strings.Contains(string(it.Error), schemas.CodeDuplicateReference) {
				t.Errorf("item %d: %d %s", i, *it.HTTPStatus, it.Error)
			}
		}
	}
	if won != 1 {
		t.Fatalf("%d of the two same-reference items won", won)
	}
	bad := st.Items[2]
	if bad.Status != "failed" || *bad.HTTPStatus != 400 || string(bad.Error) != string(single.Body) {
		t.Fatalf("invalid item: %s %v %s\nsingle create answered %s", bad.Status, bad.HTTPStatus, bad.Error, single.Body)
	}
	for _, i := range []int{1, 4} {
		it := st.Items[i]
		if it.Status != "created" || it.OrderID == nil {
			t.Fatalf("item %d: %+v", i, it)
		}
		o := d.detail(t, d.client, *it.OrderID)
		if o.CreatedVia != "api" || o.Status != "PENDING" {
			t.Fatalf("batch order: %+v", o.Order)
		}
		if i == 4 && o.ReferenceID == "" {
			t.Fatalf("no generated reference")
		}
	}

	_, token := d.newAccount(t, "batch-other-"+testenv.RandomSuffix())
	other := testenv.NewClient(t, d.client.Base, token)
	for _, p := range []string{st.BatchID.String(), uuid.NewString()} {
		if r := other.Get("/v1/orders/pod/batches/" + p); r.Status != 404 || r.Err(t).Error != schemas.CodeNotFound {
			t.Fatalf("foreign or missing batch: %d %s", r.Status, r.Body)
		}
	}
	if r := d.client.Get("/v1/orders/pod/batches/nope"); r.Status != 400 {
		t.Fatalf("bad batch id: %d %s", r.Status, r.Body)
	}
}

// TestABatchOrderThatBreaksTheTextRulesFailsAlone: an order of a batch
// whose body breaks the text rules (U+0000, a key twice, bytes that are
// not UTF-8, nesting past the limit) fails on its own, with the answer a
// single create of that body gets, and the batch's other orders are
// created. A breach in the batch's own envelope still refuses it whole.
func TestABatchOrderThatBreaksTheTextRulesFailsAlone(t *testing.T) {
	d := startDemo(t, noPusher)
	v := d.variant(t, "ACTIVE", "tshirt")
	order := func(ref, extra string) []byte {
		t.Helper()
		b, err := json.Marshal(tshirtOrder(v.VariantID, ref, 1))
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte("{"+extra), b[1:]...)
	}
	post := func(path string, raw []byte) testenv.Response {
		t.Helper()
		req, err := newJSONRequest(d.client, path, raw)
		if err != nil {
			t.Fatal(err)
		}
		return doRaw(t, req)
	}
	items := [][]byte{
		order("text-0", ""),
		order("text-1", `"note":"a\u0000b",`),
		order("text-2", `"note":"a","note":"b",`),
		order("text-3", "\"note\":\"a\xffb\","),
		order("text-4", `"note":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`,`),
	}
	singles := make([]testenv.Response, len(items))
	for i := 1; i < len(items); i++ {
		if singles[i] = post("/v1/orders/pod", items[i]); singles[i].Status != 400 {
			t.Fatalf("a single create of item %d: %d %s", i, singles[i].Status, singles[i].Body)
		}
	}
	envelope := func(items [][]byte) []byte {
		return append(append([]byte(`{"orders":[`), bytes.Join(items, []byte(","))...), "]}"...)
	}
	twice := append([]byte(`{"orders":[{}],`), envelope(items)[1:]...)
	if r := post("/v1/orders/pod/batches", twice); r.Status != 400 || r.Err(t).Details["field"] != "orders" {
		t.Fatalf("a batch with orders twice: %d %s", r.Status, r.Body)
	}

	r := post("/v1/orders/pod/batches", envelope(items))
	if r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	var st batchStatus
	r.JSON(t, &st)
	testenv.Eventually(t, 30*time.Second, func() error {
		d.client.Get("/v1/orders/pod/batches/"+st.BatchID.String()).JSON(t, &st)
		if st.Status != "completed" {
			return fmt.Errorf("batch %s: %d/%d", st.Status, st.Processed, st.Total)
		}
		return nil
	})
	if st.Succeeded != 1 || st.Failed != len(items)-1 || st.Items[0].Status != "created" {
		t.Fatalf("batch result: %+v", st)
	}
	for i := 1; i < len(items); i++ {
		it := st.Items[i]
		if it.Status != "failed" || *it.HTTPStatus != 400 || string(it.Error) != string(singles[i].Body) {
			t.Errorf("item %d: %s %v %s\nsingle create answered %s", i, it.Status, *it.HTTPStatus, it.Error, singles[i].Body)
		}
	}
}
