package http

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	json "github.com/go-json-experiment/json/v1"
	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/batch"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/pg"
)

// MaxBatchOrders is the most orders one batch holds. A batch body is bound
// by the same 1 MiB as every body: larger intakes are split into batches.
const MaxBatchOrders = 1000

// Batches is what the bulk intake endpoints need.
type Batches struct {
	Pool *pgxpool.Pool
}

// batchesPath is where batches are posted: checkInput holds their
// orders to the text rules one by one (checkBatchEnvelope).
const batchesPath = "/v1/orders/pod/batches"

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
	// The batch body is read under the create body's rules: "ORDERS" is
	// an unknown field, not "orders".
	if err := jsonv2.Unmarshal(c.Body(), &body, order.StrictOptions); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "orders" {
			return Validation("orders", "orders must be an array of create-order bodies")
		}
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			name = strings.Trim(name, `"`)
			return Validation(name, "unknown field "+name+": the body must be a JSON object {\"orders\": [create-order bodies]}")
		}
		return Validation("", "the body must be a JSON object {\"orders\": [create-order bodies]}")
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
	id := commandID(c, "batch") // a keyed repeat after a lost answer finds its batch
	account := accountOf(c)
	bodies := make([][]byte, n)
	for i, o := range body.Orders {
		bodies[i] = o
	}
	stored, err := batch.Store(ctx, b.Pool, id, account, bodies)
	if err != nil {
		return err
	}
	// A batch made now is answered from what was stored: read again, a
	// failed read (a Postgres blip) answered 503 for a batch that runs, and
	// an unkeyed client never learnt its id (found by review). A keyed
	// repeat reads the batch as it stands.
	st := BatchStatus{BatchID: id, Status: "processing", Total: n, CreatedAt: stored.CreatedAt}
	if !stored.Made {
		if st, err = b.status(ctx, account, id, false); err != nil {
			return err
		}
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

// status reads the batch id of account, with its items when asked, from
// one snapshot: the counts tell of the items listed beside them.
func (b *Batches) status(ctx context.Context, account, id uuid.UUID, items bool) (st BatchStatus, err error) {
	if !items {
		return b.statusIn(ctx, b.Pool, account, id, false)
	}
	err = pgx.BeginTxFunc(ctx, b.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		st, err = b.statusIn(ctx, tx, account, id, true)
		return err
	})
	return st, err
}

// rowQuerier is a pool or a transaction.
type rowQuerier interface {
	pg.Querier
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (b *Batches) statusIn(ctx context.Context, q rowQuerier, account, id uuid.UUID, items bool) (BatchStatus, error) {
	st := BatchStatus{BatchID: id}
	err := q.QueryRow(ctx, `SELECT b.total, b.created_at,
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
	rows, err := q.Query(ctx, `SELECT idx, done, http_status, order_id, result FROM order_batch_items
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

// BatchItem creates a batch item's order exactly as a single POST does
// and tells what that POST answered (batch.Worker's Work). A 5xx is worked
// again by the worker, and stored only when its attempts are spent.
func (o *Orders) BatchItem(ctx context.Context, it batch.Item) batch.Result {
	if e := CheckJSON(it.Body); e != nil {
		// What checkInput answers a single create with this body.
		return batch.Result{Status: e.Status(), Error: e.body()}
	}
	id := it.CommandID()
	created, _, _, err := o.createProjected(ctx, order.CreateInput{AccountID: it.Account, Body: it.Body, Via: "api",
		CommandID: id, Sent: it.Sent, MaybeSent: it.MaybeSent, LogEnd: it.LogEnd, DefaultReference: "batch-" + id.String()})
	if err == nil {
		return batch.Result{Status: fiber.StatusCreated, OrderID: &created.OrderID}
	}
	e := orderError(err)
	body := e.body()
	// An undecided create's command is on the log, and one whose send
	// failed may be: the worker keeps the item open until the next
	// attempts find its decision or that there is none.
	var rejected *order.Rejected
	return batch.Result{Status: e.Status(), Error: body, Decided: errors.As(err, &rejected), Undecided: errors.Is(err, order.ErrUndecided),
		Unknown: it.MaybeSent && errors.Is(err, order.ErrLogUnread), SendFailed: errors.Is(err, order.ErrCommandLog) && !order.Refused(err)}
}
