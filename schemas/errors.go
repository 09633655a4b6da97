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

// errorStatus is the catalogue: the one HTTP status each error code is
// answered with, wherever the error arises (a handler, a middleware, a
// decider's refusal).
var errorStatus = map[string]int{
	CodeValidation:           400,
	CodeInvalidWebhookURL:    400,
	CodeWebhookLimitReached:  400,
	CodeWebhookInactive:      400,
	CodeUnauthorized:         401,
	CodeNotFound:             404,
	CodeMethodNotAllowed:     405,
	CodeDuplicateReference:   409,
	CodeDuplicateOrder:       409,
	CodeIdempotencyInUse:     409,
	CodeInvalidOrderState:    409,
	CodeRetryLimitReached:    409,
	CodeInvalidDeliveryState: 409,
	CodePayloadTooLarge:      413,
	CodeIdempotencyReused:    422,
	CodeRateLimited:          429,
	CodeInternal:             500,
	CodeServiceUnavailable:   503,
}

// ErrorStatus is the HTTP status of an error code; an unknown code is an
// internal error (500), which a test of the catalogue keeps from happening.
func ErrorStatus(code string) int {
	if s, ok := errorStatus[code]; ok {
		return s
	}
	return 500
}

// ErrorCodes lists every code of the catalogue.
func ErrorCodes() []string {
	codes := make([]string, 0, len(errorStatus))
	for c := range errorStatus {
		codes = append(codes, c)
	}
	return codes
}
