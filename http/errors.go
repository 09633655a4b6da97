package http

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/schemas"
)

// Error is an API error: it becomes the response {error, message, details},
// with the status the catalogue (schemas.ErrorStatus) gives its code.
type Error struct {
	Code    string
	Message string
	Details map[string]any
	// RetryAfter, when positive, is sent as the Retry-After header (seconds).
	RetryAfter int
	// recorded marks the 503 of a request whose command is on the log,
	// not yet decided (Undecided): a repeat under its Idempotency-Key
	// waits for that decision (see commandSeed).
	recorded bool
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status(), e.Code, e.Message) }

// Status is the HTTP status of the error's code.
func (e *Error) Status() int { return schemas.ErrorStatus(e.Code) }

// Validation is a 400 VALIDATION_ERROR about one field (a JSON path or a
// query/path parameter name).
func Validation(field, message string) *Error {
	e := &Error{Code: schemas.CodeValidation, Message: message}
	if field != "" {
		e.Details = map[string]any{"field": field}
	}
	return e
}

// NotFound is the 404 answered for a missing resource and for another
// account's resource alike.
func NotFound(what string) *Error {
	return &Error{Code: schemas.CodeNotFound, Message: what + " not found"}
}

// Unavailable is the 503 answered when a dependency is down.
func Unavailable(what string) *Error {
	return &Error{Code: schemas.CodeServiceUnavailable,
		Message: what + " is unavailable; try again shortly", RetryAfter: 2}
}

// NotYet is the 503 answered when what the request depends on is not
// decided yet (why says what): nothing was recorded, and a repeat runs
// again.
func NotYet(why string) *Error {
	return &Error{Code: schemas.CodeServiceUnavailable, RetryAfter: 5, Message: why + "; nothing was recorded: try again shortly"}
}

// Undecided is the 503 answered when a command is on its log but was not
// decided in time; lookup says where else its outcome shows, if anywhere.
func Undecided(lookup string) *Error {
	return &Error{Code: schemas.CodeServiceUnavailable, RetryAfter: 5, recorded: true,
		Message: "the request was recorded but not decided in time; it will still be applied. Repeat it with the same Idempotency-Key" +
			lookup + " to learn the outcome"}
}

type errorBody struct {
	Error   string         `json:"error"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// answer is e as the API answers it.
func (e *Error) answer() errorBody {
	return errorBody{Error: e.Code, Message: e.Message, Details: e.Details}
}

// body is e's answer encoded (a batch item's stored result).
func (e *Error) body() []byte {
	b, _ := marshalJSON(e.answer())
	return b
}

// errorHandler turns any error a handler returns into the one error shape.
func errorHandler(log *slog.Logger, methods *methodTable) fiber.ErrorHandler {
	return func(c *fiber.Ctx, err error) error {
		apiErr := toAPIError(err)
		if apiErr.Status() == fiber.StatusMethodNotAllowed && c.GetRespHeader(fiber.HeaderAllow) == "" {
			apiErr = methodNotAllowed(c, methods.allowed(c.Path()))
		}
		if apiErr.Status() >= 500 {
			log.ErrorContext(c.UserContext(), "request failed", "method", c.Method(),
				"route", methods.routeOf(c), "status", apiErr.Status(), "err", err)
		}
		if apiErr.RetryAfter > 0 {
			c.Set(fiber.HeaderRetryAfter, strconv.Itoa(apiErr.RetryAfter))
		}
		if apiErr.Status() == fiber.StatusUnauthorized {
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="pod"`)
		}
		return c.Status(apiErr.Status()).JSON(apiErr.answer())
	}
}

func toAPIError(err error) *Error {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		switch fe.Code {
		case fiber.StatusNotFound:
			return &Error{Code: schemas.CodeNotFound, Message: "no such endpoint"}
		case fiber.StatusMethodNotAllowed:
			return &Error{Code: schemas.CodeMethodNotAllowed, Message: "method not allowed on this endpoint"}
		case fiber.StatusRequestEntityTooLarge:
			return &Error{Code: schemas.CodePayloadTooLarge, Message: "request body is larger than 1 MiB"}
		}
		if fe.Code < 500 {
			// Fiber's own messages can quote the raw request (a malformed
			// header line, Authorization included): answer with the
			// status's standard text, never with request bytes. Whatever
			// Fiber's status (a header too large, a malformed line), the
			// request is invalid: 400 VALIDATION_ERROR, as the catalogue says.
			return &Error{Code: schemas.CodeValidation, Message: "malformed request: " + strings.ToLower(utils.StatusMessage(fe.Code))}
		}
	}
	if pg.IsUnavailable(err) {
		return Unavailable("the database")
	}
	return &Error{Code: schemas.CodeInternal, Message: "internal error"}
}
