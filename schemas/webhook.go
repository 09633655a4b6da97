package schemas

import (
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
)

// TypeWebhookTest is the topic of a manual test delivery; it cannot be
// subscribed to.
const TypeWebhookTest = "webhook.test"

// WebhookTopic is a subscribable topic with its description.
type WebhookTopic struct {
	Topic       string `json:"topic"`
	Description string `json:"description"`
}

// WebhookTopics are the topics a webhook may subscribe to, in the order
// GET /v1/me/webhooks/topics lists them.
var WebhookTopics = []WebhookTopic{
	{TypeOrderCreated, "An order was created."},
	{TypeOrderStatusUpdated, "An order's status changed; data.previous holds the earlier status."},
	{TypeOrderCancelled, "An order was cancelled."},
	{TypeTrackingCreated, "A tracking number was assigned to an order."},
	{TypeTrackingUpdated, "The carrier reported a tracking change; data.previous holds the changed fields' earlier values."},
}

// IsWebhookTopic reports whether t may be subscribed to.
func IsWebhookTopic(t string) bool {
	for _, w := range WebhookTopics {
		if w.Topic == t {
			return true
		}
	}
	return false
}

// Webhook fact types on TopicWebhookEvents (keyed by account id). They never
// carry a secret.
const (
	TypeWebhookCreated       = "webhook.created"
	TypeWebhookUpdated       = "webhook.updated"
	TypeWebhookDeleted       = "webhook.deleted"
	TypeWebhookSecretRotated = "webhook.secret_rotated"
	TypeWebhookDisabled      = "webhook.disabled"
	TypeWebhookEnabled       = "webhook.enabled"
)

// WebhookFact is the data of every webhook.* event: the webhook after the
// change (without its secret).
type WebhookFact struct {
	ID             uuid.UUID `json:"id"`
	AccountID      uuid.UUID `json:"account_id"`
	URL            string    `json:"url"`
	Description    *string   `json:"description"`
	Topics         []string  `json:"topics"`
	IsActive       bool      `json:"is_active"`
	DisabledReason *string   `json:"disabled_reason"`
	Gen            int       `json:"gen"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// DeliveryTask is one delivery waiting for its next attempt. It travels on
// TopicWebhookDeliveries (attempt 1 of a run), the retry tiers and, after
// the last failure, the DLQ, keyed by webhook id. Payload is the exact
// envelope every attempt sends.
type DeliveryTask struct {
	DeliveryID uuid.UUID       `json:"delivery_id"`
	WebhookID  uuid.UUID       `json:"webhook_id"`
	AccountID  uuid.UUID       `json:"account_id"`
	EventID    uuid.UUID       `json:"event_id"`
	Topic      string          `json:"topic"`
	Gen        int             `json:"gen"`
	Run        int             `json:"run"`
	Attempt    int             `json:"attempt"` // the attempt to make, 1..7
	DueAt      time.Time       `json:"due_at"`
	CreatedAt  time.Time       `json:"created_at"` // when the delivery was created
	Payload    json.RawMessage `json:"payload"`
}

// Delivery statuses.
const (
	DeliveryPending   = "pending"
	DeliverySuccess   = "success"
	DeliveryFailed    = "failed"
	DeliveryCancelled = "cancelled"
)

// AttemptResult is the outcome of one attempt (or of a cancellation) on
// TopicWebhookAttempts. Status is the delivery's status after it: pending
// when a retry is scheduled (NextRetryAt set).
type AttemptResult struct {
	DeliveryID  uuid.UUID  `json:"delivery_id"`
	WebhookID   uuid.UUID  `json:"webhook_id"`
	AccountID   uuid.UUID  `json:"account_id"`
	EventID     uuid.UUID  `json:"event_id"`
	Topic       string     `json:"topic"`
	Gen         int        `json:"gen"`
	Run         int        `json:"run"`
	Attempt     int        `json:"attempt"`
	Attempted   bool       `json:"attempted"` // false when no request was made: a cancellation, or a request that could not be signed
	Status      string     `json:"status"`
	StatusCode  *int       `json:"status_code"`
	Error       *string    `json:"error"`
	NextRetryAt *time.Time `json:"next_retry_at"`
	At          time.Time  `json:"at"`
	CreatedAt   time.Time  `json:"created_at"` // when the delivery was created
}
