package batch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/internal/pgnotify"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/testenv"
)

// TestABatchIsWorkedOnceThroughTheJobQueue stores a batch of 40 items (3
// runs), works it with a Work whose item 17 is undecided the first time,
// and checks that every item is worked, the undecided one once more, and
// that no job is left.
func TestABatchIsWorkedOnceThroughTheJobQueue(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pool := pgtest.NewPool(t)
	defer cancel() // before the pool closes: the worker and listener hold connections
	log := slog.New(slog.DiscardHandler)
	notify := pgnotify.New(pool, log, jobs.Notify)
	go notify.Run(ctx)

	const n = 40
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"i":%d}`, i)
	}
	id, account := uuid.New(), uuid.New()
	if _, err := Store(ctx, pool, id, account, bodies); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	worked := map[int]int{}
	w := &Worker{Pool: pool, Notify: notify, Log: log, Work: func(_ context.Context, it Item) Result {
		mu.Lock()
		defer mu.Unlock()
		worked[it.Index]++
		if it.Account != account || string(it.Body) != fmt.Sprintf(`{"i":%d}`, it.Index) {
			t.Errorf("item %d: account %s, body %s", it.Index, it.Account, it.Body)
		}
		switch {
		case it.Index == 17 && worked[it.Index] == 1:
			return Result{} // undecided: worked again after retryAfter
		case it.Index%2 == 1:
			return Result{Status: 400, Error: []byte(`{"error":"VALIDATION_ERROR"}`)}
		}
		order := it.CommandID()
		return Result{Status: 201, OrderID: &order}
	}}
	go w.Run(ctx)

	testenv.Eventually(t, 30*time.Second, func() error {
		var done, left int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM order_batch_items WHERE done),
			(SELECT count(*) FROM jobs WHERE queue = $1)`, Queue).Scan(&done, &left); err != nil {
			return err
		}
		if done != n || left != 0 {
			return fmt.Errorf("%d of %d items done, %d jobs left", done, n, left)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		want := 1
		if i == 17 {
			want = 2
		}
		if worked[i] != want {
			t.Errorf("item %d worked %d times, want %d", i, worked[i], want)
		}
	}
	rows, err := pool.Query(ctx, `SELECT idx, http_status, order_id, result::text FROM order_batch_items WHERE batch_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var idx, status int
		var order *uuid.UUID
		var result *string
		if err := rows.Scan(&idx, &status, &order, &result); err != nil {
			t.Fatal(err)
		}
		ok := status == 201 && order != nil && *order == (Item{Batch: id, Index: idx}).CommandID() && result == nil
		if idx%2 == 1 {
			ok = status == 400 && order == nil && result != nil && *result == `{"error":"VALIDATION_ERROR"}`
		}
		if !ok {
			t.Errorf("item %d stored as %d %v %v", idx, status, order, result)
		}
	}
}
