package schemas

import (
	"time"

	"github.com/google/uuid"
)

// FulfillmentUpdate is a message on TopicFulfillmentUpdates, keyed by order
// id: the production system acknowledged the order (status SYNCED), it
// shipped (FULFILLED), and/or its tracking changed. ID makes a message sent
// twice count once.
type FulfillmentUpdate struct {
	ID       uuid.UUID `json:"id"`
	OrderID  uuid.UUID `json:"order_id"`
	Status   string    `json:"status,omitempty"`
	Tracking *Tracking `json:"tracking,omitempty"`
	SentAt   time.Time `json:"sent_at"`
}
