package schemas

import (
	"strconv"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Order event types on TopicOrderEvents (the public stream: facts only).
const (
	TypeOrderCreated       = "order.created"
	TypeOrderStatusUpdated = "order.status_updated"
	TypeOrderCancelled     = "order.cancelled"
	TypeTrackingCreated    = "tracking.created"
	TypeTrackingUpdated    = "tracking.updated"
)

// Record headers on TopicOrderEvents: the event's topic and the order's
// version after the event (1 for order.created, +1 per event of the order).
// A consumer can drop an event whose version it already applied.
const (
	HeaderEventType    = "event-type"
	HeaderOrderVersion = "order-version"
)

// OrderVersion reads the HeaderOrderVersion header of a pod.order.events
// record; 0 when it is missing or malformed.
func OrderVersion(headers []kgo.RecordHeader) int {
	for _, h := range headers {
		if h.Key == HeaderOrderVersion {
			n, _ := strconv.Atoi(string(h.Value))
			return n
		}
	}
	return 0
}

// Order statuses.
const (
	StatusPending    = "PENDING"
	StatusProcessing = "PROCESSING"
	StatusSuccess    = "SUCCESS"
	StatusSynced     = "SYNCED"
	StatusFulfilled  = "FULFILLED"
	StatusFailed     = "FAILED"
	StatusCancelled  = "CANCELLED"
)

// OrderStatuses lists every order status.
var OrderStatuses = []string{StatusPending, StatusProcessing, StatusSuccess, StatusSynced, StatusFulfilled,
	StatusFailed, StatusCancelled}

// OrderRef is the order as every order.* and tracking.* event carries it
// (the interface's data.order).
type OrderRef struct {
	ID             uuid.UUID `json:"id"`
	ReferenceID    string    `json:"reference_id"`
	StoreID        uuid.UUID `json:"store_id"`
	AccountID      uuid.UUID `json:"account_id"`
	ClientStatus   *string   `json:"client_status"`
	ShipmentStatus *string   `json:"shipment_status"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// Tracking is an order's shipment tracking.
type Tracking struct {
	TrackingNumber string `json:"tracking_number"`
	Carrier        string `json:"carrier"`
	TrackingURL    string `json:"tracking_url"`
	ShipmentStatus string `json:"shipment_status"`
}

// OrderEventData is the data of every order.* and tracking.* event:
// {order, tracking, previous?}. Created carries the whole order (lines,
// pricing, recipient) on order.created; Push describes the push attempt on
// status changes caused by pushing.
type OrderEventData struct {
	Order    OrderRef        `json:"order"`
	Tracking *Tracking       `json:"tracking"`
	Previous json.RawMessage `json:"previous,omitempty"`
	Created  *OrderDetails   `json:"created,omitempty"`
	Push     *PushAttempt    `json:"push,omitempty"`
	// TrackingReportedAt, on tracking events, is when the carrier or
	// production sent the tracking (absent when the update did not say).
	TrackingReportedAt *time.Time `json:"tracking_reported_at,omitempty"`
}

// PushAttempt is one push of the order to the store platform.
type PushAttempt struct {
	Attempt             int    `json:"attempt"`
	Error               string `json:"error,omitempty"`
	PlatformOrderID     string `json:"platform_order_id,omitempty"`
	PlatformOrderNumber string `json:"platform_order_number,omitempty"`
	Automatic           bool   `json:"automatic,omitempty"`
	// AutoRetries is, on a failed push, how many automatic retries the order
	// has used so far (the pusher schedules the next while it is below 3).
	AutoRetries int `json:"auto_retries,omitempty"`
}

// OrderDetails is everything an order was created with.
type OrderDetails struct {
	CreatedVia      string          `json:"created_via"`
	Duplicate       bool            `json:"duplicate"`
	IdempotencyKey  uuid.UUID       `json:"idempotency_key"`
	Customer        json.RawMessage `json:"customer"`
	ShippingAddress json.RawMessage `json:"shipping_address"`
	LabelLink       string          `json:"label_link,omitempty"`
	TrackingNumber  string          `json:"tracking_number,omitempty"`
	ShippingService string          `json:"shipping_service"`
	AddonService    []string        `json:"addon_service"`
	Note            string          `json:"note,omitempty"`
	Tags            string          `json:"tags,omitempty"`
	Lines           json.RawMessage `json:"line_items"`
	Pricing         json.RawMessage `json:"pricing"`
}
