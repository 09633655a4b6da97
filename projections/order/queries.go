package order

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/schemas"
)

// ErrNotFound is a missing order, or another account's.
var ErrNotFound = errors.New("order not found")

// Order is the POD order of the list and of create/retry/cancel responses.
type Order struct {
	OrderID       uuid.UUID       `json:"order_id"`
	ReferenceID   string          `json:"reference_id"`
	StoreID       uuid.UUID       `json:"store_id"`
	Status        string          `json:"status"`
	Duplicate     bool            `json:"duplicate"`
	QueuePosition *int            `json:"queue_position"`
	AddonService  []string        `json:"addon_service"`
	Pricing       json.RawMessage `json:"pricing"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
	CreatedVia    string          `json:"created_via"`

	queuedAt time.Time
}

// Detail is GET /v1/orders/pod/{id}.
type Detail struct {
	Order
	Customer            json.RawMessage   `json:"customer"`
	ShippingAddress     json.RawMessage   `json:"shipping_address"`
	LabelLink           *string           `json:"label_link"`
	TrackingNumber      *string           `json:"tracking_number"`
	ShippingService     string            `json:"shipping_service"`
	Note                *string           `json:"note"`
	Tags                *string           `json:"tags"`
	LineItems           []LineItem        `json:"line_items"`
	Tracking            *schemas.Tracking `json:"tracking"`
	ShipmentStatus      *string           `json:"shipment_status"`
	PlatformOrderID     *string           `json:"platform_order_id"`
	PlatformOrderNumber *string           `json:"platform_order_number"`
	DeliveryAttempts    []Attempt         `json:"delivery_attempts"`
}

// LineItem is a line of the detail.
type LineItem struct {
	LineItemID         uuid.UUID         `json:"line_item_id"`
	VariantID          uuid.UUID         `json:"variant_id"`
	Quantity           int               `json:"quantity"`
	Sides              map[string]string `json:"sides"`
	LineTotal          *schemas.Money    `json:"line_total"`
	SKU                *string           `json:"sku"`
	Title              *string           `json:"title"`
	ImageURL           *string           `json:"image_url"`
	AddonService       *string           `json:"addon_service"`
	LineAddonSurcharge *schemas.Money    `json:"line_addon_surcharge"`
	PrintingTechnique  *string           `json:"printing_technique,omitempty"`
	EmbFile            *string           `json:"emb_file,omitempty"`
	DesignEmbType      *string           `json:"design_emb_type,omitempty"`
	NumberOfPets       *int              `json:"number_of_pets,omitempty"`
	YarnType           *string           `json:"yarn_type,omitempty"`
}

// Attempt is one push to the store platform.
type Attempt struct {
	Attempt    int        `json:"attempt"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	Outcome    *string    `json:"outcome"`
	Error      *string    `json:"error"`
}

// QueueRecord is the Queue Order record of an order.
type QueueRecord struct {
	OrderID             uuid.UUID `json:"order_id"`
	Status              string    `json:"status"`
	QueuePosition       *int      `json:"queue_position"`
	IdempotencyKey      uuid.UUID `json:"idempotency_key"`
	PlatformOrderID     *string   `json:"platform_order_id"`
	PlatformOrderNumber *string   `json:"platform_order_number"`
	Duplicate           bool      `json:"duplicate"`
	QueuedAt            time.Time `json:"queued_at"`
}

// Key is the keyset position of an order in the list (newest first).
type Key struct {
	CreatedAt time.Time `json:"c"`
	ID        uuid.UUID `json:"i"`
}

// Filter narrows the order list.
type Filter struct {
	Status   string
	From, To *time.Time // created_at in [From, To)
	After    *Key
	Limit    int
}

// Queries answers the order endpoints' reads.
type Queries struct{ Pool *pgxpool.Pool }

const orderColumns = `order_id, reference_id, store_id, status, duplicate, addon_service, pricing, created_at,
	updated_at, created_via, queued_at`

// queuePosition is, as a column of orders o, the 1-based place of a
// PENDING order in its store's queue (NULL otherwise): its entry's
// sequence number, less the store's frontier (entries up to it have all
// left), less the entries beyond the frontier that left out of turn before
// it. One row read, however long the queue (see migrations 008 and 012).
const queuePosition = `CASE WHEN o.status = 'PENDING' THEN
	o.queue_seq - (SELECT q.frontier + (SELECT count(*) FROM unnest(q.departed) AS d(seq) WHERE d.seq < o.queue_seq)
		FROM store_queues q WHERE q.store_id = o.store_id) END`

func scanOrder(row pgx.Row, o *Order, extra ...any) error {
	return row.Scan(append([]any{&o.OrderID, &o.ReferenceID, &o.StoreID, &o.Status, &o.Duplicate, &o.AddonService,
		&o.Pricing, &o.CreatedAt, &o.UpdatedAt, &o.CreatedVia, &o.queuedAt}, extra...)...)
}

// List returns the account's orders, newest first, and whether more follow.
func (q Queries) List(ctx context.Context, account uuid.UUID, f Filter) ([]Order, bool, error) {
	where := []string{"account_id = $1"}
	args := []any{account}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.Status != "" {
		add("status = $%d", f.Status)
	}
	if f.From != nil {
		add("created_at >= $%d", *f.From)
	}
	if f.To != nil {
		add("created_at < $%d", *f.To)
	}
	if f.After != nil {
		args = append(args, f.After.CreatedAt, f.After.ID)
		where = append(where, fmt.Sprintf("(created_at, order_id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	args = append(args, f.Limit+1)
	rows, err := q.Pool.Query(ctx, `SELECT `+orderColumns+`, `+queuePosition+`
		FROM orders o WHERE `+strings.Join(where, " AND ")+
		fmt.Sprintf(` ORDER BY created_at DESC, order_id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, false, err
	}
	var out []Order
	for rows.Next() {
		var o Order
		if err := scanOrder(rows, &o, &o.QueuePosition); err != nil {
			rows.Close()
			return nil, false, err
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	more := len(out) > f.Limit
	if more {
		out = out[:f.Limit]
	}
	return out, more, nil
}

// Get returns one order of the account.
func (q Queries) Get(ctx context.Context, account, id uuid.UUID) (Order, error) {
	var o Order
	err := scanOrder(q.Pool.QueryRow(ctx, `SELECT `+orderColumns+`, `+queuePosition+`
		FROM orders o WHERE order_id = $1 AND account_id = $2`, id, account), &o, &o.QueuePosition)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	return o, err
}

// Entered returns one order of the account with, while it is PENDING, the
// place it took when it entered the queue (what a create answers), read
// from the row instead of counted over the store's queue.
func (q Queries) Entered(ctx context.Context, account, id uuid.UUID) (Order, error) {
	var o Order
	err := scanOrder(q.Pool.QueryRow(ctx, `SELECT `+orderColumns+`,
		COALESCE(CASE WHEN o.status = 'PENDING' THEN entry_position END, `+queuePosition+`)
		FROM orders o WHERE order_id = $1 AND account_id = $2`, id, account), &o, &o.QueuePosition)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	return o, err
}

// WithStatus is o as it was right after a decision that left it in status
// (a GET may already see a later status; a command's response shows its own).
func (q Queries) WithStatus(ctx context.Context, o Order, status string) (Order, error) {
	if status == "" || status == o.Status {
		return o, nil
	}
	o.Status = status
	if status == schemas.StatusPending {
		// Its place when it re-entered the queue: behind everything queued.
		// The read model does not count it as PENDING (its status differs).
		var n int
		err := q.Pool.QueryRow(ctx, `SELECT pending FROM store_queues WHERE store_id = $1`, o.StoreID).Scan(&n)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return o, err
		}
		n++
		o.QueuePosition = &n
		return o, nil
	}
	o.QueuePosition = nil
	return o, nil
}

// Detail returns the order detail with its push attempts.
func (q Queries) Detail(ctx context.Context, account, id uuid.UUID) (Detail, error) {
	var d Detail
	var lines []byte
	var tracking []byte
	err := scanOrder(q.Pool.QueryRow(ctx, `SELECT `+orderColumns+`, customer, shipping_address, label_link, tracking_number,
		shipping_service, note, tags, line_items, tracking, shipment_status, platform_order_id, platform_order_number,
		`+queuePosition+` FROM orders o WHERE order_id = $1 AND account_id = $2`, id, account), &d.Order,
		&d.Customer, &d.ShippingAddress, &d.LabelLink, &d.TrackingNumber, &d.ShippingService, &d.Note, &d.Tags,
		&lines, &tracking, &d.ShipmentStatus, &d.PlatformOrderID, &d.PlatformOrderNumber, &d.QueuePosition)
	if errors.Is(err, pgx.ErrNoRows) {
		return Detail{}, ErrNotFound
	}
	if err != nil {
		return Detail{}, err
	}
	if d.LineItems, err = detailLines(lines); err != nil {
		return Detail{}, err
	}
	if len(tracking) > 0 {
		d.Tracking = &schemas.Tracking{}
		if err := codec.Unmarshal(tracking, d.Tracking); err != nil {
			return Detail{}, err
		}
	}
	rows, err := q.Pool.Query(ctx, `SELECT attempt, started_at, finished_at, outcome, error FROM order_push_attempts
		WHERE order_id = $1 ORDER BY attempt`, id)
	if err != nil {
		return Detail{}, err
	}
	d.DeliveryAttempts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		err := r.Scan(&a.Attempt, &a.StartedAt, &a.FinishedAt, &a.Outcome, &a.Error)
		return a, err
	})
	if err != nil {
		return Detail{}, err
	}
	if d.DeliveryAttempts == nil {
		d.DeliveryAttempts = []Attempt{}
	}
	return d, nil
}

func detailLines(raw []byte) ([]LineItem, error) {
	var stored []order.Line // as order.created carries them
	if err := codec.Unmarshal(raw, &stored); err != nil {
		return nil, fmt.Errorf("order lines: %w", err)
	}
	out := make([]LineItem, 0, len(stored))
	for _, l := range stored {
		li := LineItem{LineItemID: l.LineItemID, VariantID: l.VariantID, Quantity: l.Quantity, Sides: l.Sides,
			LineTotal: &l.LineTotal, SKU: str(l.SKU), Title: str(l.Title), ImageURL: str(l.ImageURL),
			AddonService: str(l.AddonService), PrintingTechnique: str(l.PrintingTechnique), EmbFile: str(l.EmbFile),
			DesignEmbType: str(l.DesignEmbType), NumberOfPets: l.NumberOfPets, YarnType: str(l.YarnType)}
		if l.AddonService != "" {
			li.LineAddonSurcharge = &l.LineAddonSurcharge
		}
		out = append(out, li)
	}
	return out, nil
}

func str(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Queue returns the Queue Order record of an order. Its status is the push
// queue's view: SYNCED and FULFILLED orders were pushed (SUCCESS); a
// cancelled order will never be pushed (FAILED).
func (q Queries) Queue(ctx context.Context, account, id uuid.UUID) (QueueRecord, error) {
	var r QueueRecord
	var o Order
	err := scanOrder(q.Pool.QueryRow(ctx, `SELECT `+orderColumns+`, idempotency_key, platform_order_id, platform_order_number,
		`+queuePosition+` FROM orders o WHERE order_id = $1 AND account_id = $2`, id, account), &o,
		&r.IdempotencyKey, &r.PlatformOrderID, &r.PlatformOrderNumber, &o.QueuePosition)
	if errors.Is(err, pgx.ErrNoRows) {
		return QueueRecord{}, ErrNotFound
	}
	if err != nil {
		return QueueRecord{}, err
	}
	r.OrderID, r.Duplicate, r.QueuedAt, r.QueuePosition = o.OrderID, o.Duplicate, o.queuedAt, o.QueuePosition
	switch o.Status {
	case schemas.StatusSynced, schemas.StatusFulfilled:
		r.Status = schemas.StatusSuccess
	case schemas.StatusCancelled:
		r.Status = schemas.StatusFailed
	default:
		r.Status = o.Status
	}
	return r, nil
}

// Version is how many of the order's events the read model applied (0 when
// it has none yet).
func (q Queries) Version(ctx context.Context, id uuid.UUID) (int, error) {
	var v int
	err := q.Pool.QueryRow(ctx, `SELECT version FROM orders WHERE order_id = $1`, id).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}
