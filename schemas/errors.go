package schemas

// Error codes of the public API. The error body is
// {"error": <code>, "message": <text>, "details": {...}}.
const (
	CodeValidation           = "VALIDATION_ERROR"
	CodeUnauthorized         = "UNAUTHORIZED"
	CodeNotFound             = "NOT_FOUND"
	CodeMethodNotAllowed     = "METHOD_NOT_ALLOWED"
	CodePayloadTooLarge      = "PAYLOAD_TOO_LARGE"
	CodeRateLimited          = "RATE_LIMITED"
	CodeServiceUnavailable   = "SERVICE_UNAVAILABLE"
	CodeInternal             = "INTERNAL_ERROR"
	CodeDuplicateReference   = "DUPLICATE_REFERENCE_ID"
	CodeDuplicateOrder       = "DUPLICATE_ORDER"
	CodeIdempotencyReused    = "IDEMPOTENCY_KEY_REUSED"
	CodeIdempotencyInUse     = "IDEMPOTENCY_KEY_IN_USE"
	CodeInvalidOrderState    = "INVALID_ORDER_STATE"
	CodeRetryLimitReached    = "RETRY_LIMIT_REACHED"
	CodeInvalidWebhookURL    = "INVALID_WEBHOOK_URL"
	CodeWebhookLimitReached  = "WEBHOOK_LIMIT_REACHED"
	CodeWebhookInactive      = "WEBHOOK_INACTIVE"
	CodeInvalidDeliveryState = "INVALID_DELIVERY_STATE"
)
