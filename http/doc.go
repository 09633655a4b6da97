// Package http is the public API: a Fiber app with authentication, rate
// limiting, one error shape, cursor pagination and thin handlers that call
// the command side or the read models.
//
// Every error response is {"error": CODE, "message": text, "details": {...}}
// and is written in one place (errors.go). Codes are listed in schemas.
package http
