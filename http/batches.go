package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/pgnotify"
)

// MaxBatchOrders is the most orders one batch holds. A batch body is bound
// by the same 1 MiB as every body: larger intakes are split into batches.
const MaxBatchOrders = 1000

// NotifyBatch wakes batch workers when a batch is stored.
const (
	NotifyBatch = "order_batch"
	batchNew    = "new"
)

// Batches is what the bulk intake endpoints need.
type Batches struct {
	Pool *pgxpool.Pool
}

type batchBody struct {
	Orders []json.RawMessage `json:"orders"`
}

// BatchStatus is GET /v1/orders/pod/batches/{id}.
type BatchStatus struct {
	BatchID     uuid.UUID   `json:"batch_id"`
	Status      string      `json:"status"` // processing, completed
	Total       int         `json:"total"`
	Processed   int         `json:"processed"`
	Succeeded   int         `json:"succeeded"`
	Failed      int         `json:"failed"`
	CreatedAt   time.Time   `json:"created_at"`
	CompletedAt *time.Time  `json:"completed_at"`
	Items       []BatchItem `json:"items,omitempty"`
}

// BatchItem is the result of one order of a batch: the order id on 201,
// else the error body a single create would have answered.
type BatchItem struct {
	Index      int             `json:"index"`
	Status     string          `json:"status"` // pending, created, failed
	HTTPStatus *int            `json:"http_status"`
	OrderID    *uuid.UUID      `json:"order_id"`
	Error      json.RawMessage `json:"error"`
}

func (b *Batches) post(c *fiber.Ctx) error {
	var body batchBody
	dec := json.NewDecoder(bytes.NewReader(c.Body()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return Validation("", "the body must be a JSON object {\"orders\": [create-order bodies]}: "+err.Error())
	}
	n := len(body.Orders)
	if n == 0 || n > MaxBatchOrders {
		return Validation("orders", fmt.Sprintf("orders must hold 1 to %d create-order bodies", MaxBatchOrders))
	}
	for i, o := range body.Orders {
		if len(o) == 0 || o[0] != '{' {
			return Validation(fmt.Sprintf("orders[%d]", i), fmt.Sprintf("orders[%d] must be a JSON object", i))
		}
	}
	ctx := c.UserContext()
	id := uuid.New()
	account := accountOf(c)
	err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		var created time.Time
		if err := tx.QueryRow(ctx, `INSERT INTO order_batches (batch_id, account_id, total) VALUES ($1, $2, $3) RETURNING created_at`,
			id, account, n).Scan(&created); err != nil {
			return err
		}
		rows := make([][]any, n)
		for i, o := range body.Orders {
			rows[i] = []any{id, i, []byte(o)}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"order_batch_items"}, []string{"batch_id", "idx", "body"}, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyBatch, batchNew)
		return err
	})
	if err != nil {
		return err
	}
	st, err := b.status(ctx, account, id, false)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusAccepted).JSON(st)
}

func (b *Batches) get(c *fiber.Ctx) error {
	id, err := pathUUID(c, "batch_id")
	if err != nil {
		return err
	}
	st, err := b.status(c.UserContext(), accountOf(c), id, true)
	if errors.Is(err, pgx.ErrNoRows) {
		return NotFound("batch")
	}
	if err != nil {
		return err
	}
	return c.JSON(st)
}

func (b *Batches) status(ctx context.Context, account, id uuid.UUID, items bool) (BatchStatus, error) {
	st := BatchStatus{BatchID: id}
	err := b.Pool.QueryRow(ctx, `SELECT b.total, b.created_at,
		count(*) FILTER (WHERE i.done),
		count(*) FILTER (WHERE i.done AND i.http_status = 201),
		max(i.finished_at)
		FROM order_batches b JOIN order_batch_items i USING (batch_id)
		WHERE b.batch_id = $1 AND b.account_id = $2 GROUP BY b.batch_id`, id, account).
		Scan(&st.Total, &st.CreatedAt, &st.Processed, &st.Succeeded, &st.CompletedAt)
	if err != nil {
		return st, err
	}
	st.Failed = st.Processed - st.Succeeded
	st.Status = "processing"
	if st.Processed == st.Total {
		st.Status = "completed"
	} else {
		st.CompletedAt = nil
	}
	if !items {
		return st, nil
	}
	rows, err := b.Pool.Query(ctx, `SELECT idx, done, http_status, order_id, result FROM order_batch_items
		WHERE batch_id = $1 ORDER BY idx`, id)
	if err != nil {
		return st, err
	}
	st.Items, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (BatchItem, error) {
		var it BatchItem
		var done bool
		var result []byte
		if err := r.Scan(&it.Index, &done, &it.HTTPStatus, &it.OrderID, &result); err != nil {
			return it, err
		}
		switch {
		case !done:
			it.Status = "pending"
		case it.HTTPStatus != nil && *it.HTTPStatus == fiber.StatusCreated:
			it.Status = "created"
		default:
			it.Status = "failed"
			it.Error = result
		}
		return it, nil
	})
	return st, err
}

// BatchWorker works through batch items: each goes through exactly what a
// single create does. A worker locks the items it works (FOR UPDATE SKIP
// LOCKED in a transaction that also stores their results), so instances
// share the work and a killed instance's items are free again at once; an
// item worked twice finds its first decision (its command id derives from
// the batch and position), so it never creates a second order.
type BatchWorker struct {
	Pool        *pgxpool.Pool
	Orders      *Orders
	Notify      *pgnotify.Listener // channel NotifyBatch
	Log         *slog.Logger
	Concurrency int // items worked at once; default 16
}

type batchTask struct {
	batch   uuid.UUID
	idx     int
	account uuid.UUID
	body    []byte
	// results
	status  int
	orderID *uuid.UUID
	result  []byte
}

// Run works until ctx ends.
func (w *BatchWorker) Run(ctx context.Context) {
	if w.Concurrency <= 0 {
		w.Concurrency = 16
	}
	wake, stop := w.Notify.Subscribe(NotifyBatch, batchNew)
	defer stop()
	for ctx.Err() == nil {
		n, err := w.round(ctx)
		if err != nil && ctx.Err() == nil {
			w.Log.Warn("working batch items failed", "err", err)
		}
		if n == 0 || err != nil {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// round locks up to a few dozen pending items, works them and stores their
// results in the same transaction. It returns how many it worked.
func (w *BatchWorker) round(ctx context.Context) (int, error) {
	tx, err := w.Pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, `SELECT i.batch_id, i.idx, b.account_id, i.body
		FROM order_batch_items i JOIN order_batches b USING (batch_id)
		WHERE NOT i.done ORDER BY i.batch_id, i.idx LIMIT $1 FOR UPDATE OF i SKIP LOCKED`, w.Concurrency*4)
	if err != nil {
		return 0, err
	}
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*batchTask, error) {
		var t batchTask
		return &t, r.Scan(&t.batch, &t.idx, &t.account, &t.body)
	})
	if err != nil || len(tasks) == 0 {
		return 0, err
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, w.Concurrency)
	for _, t := range tasks {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			w.work(ctx, t)
		}()
	}
	wg.Wait()
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	b := &pgx.Batch{}
	for _, t := range tasks {
		if t.status == 0 {
			continue // not decided: stays pending
		}
		b.Queue(`UPDATE order_batch_items SET done = true, http_status = $3, order_id = $4, result = $5, finished_at = now()
			WHERE batch_id = $1 AND idx = $2`, t.batch, t.idx, t.status, t.orderID, t.result)
	}
	if err := tx.SendBatch(bg, b).Close(); err != nil {
		return 0, err
	}
	return len(tasks), tx.Commit(bg)
}

func (w *BatchWorker) work(ctx context.Context, t *batchTask) {
	item := uuid.NewSHA1(t.batch, fmt.Appendf(nil, "item/%d", t.idx))
	created, _, _, err := w.Orders.createProjected(ctx, order.CreateInput{AccountID: t.account, Body: t.body, Via: "api",
		CommandID: item, DefaultReference: "batch-" + item.String()})
	if err == nil {
		t.status, t.orderID = fiber.StatusCreated, &created.OrderID
		return
	}
	e := orderError(err)
	if e.Status() >= 500 {
		// Not decided (a dependency away): the item is worked again later.
		w.Log.Warn("batch item not decided; will retry", "batch", t.batch, "index", t.idx, "status", e.Status())
		return
	}
	t.status = e.Status()
	t.result, _ = marshalJSON(errorBody{Error: e.Code, Message: e.Message, Details: e.Details})
}
