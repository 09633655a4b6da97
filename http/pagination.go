package http

import (
	"bytes"
	"encoding/base64"
	"strconv"

	json "github.com/go-json-experiment/json/v1"
	"github.com/gofiber/fiber/v2"
)

// Page limits of every list.
const (
	DefaultLimit = 20
	MaxLimit     = 100
)

// Page is the response shape of every list.
type Page[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

// parseLimit reads ?limit (1..100, default 20).
func parseLimit(c *fiber.Ctx) (int, error) {
	raw := c.Query("limit")
	if raw == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, Validation("limit", "limit must be a whole number from 1 to 100")
	}
	return n, nil
}

// parseCursor decodes ?cursor into key; it reports whether one was given.
// Cursors are opaque to clients: base64url of a JSON keyset position.
//
// A cursor is request text that reaches a query, so the position it holds
// keeps the input rules every request body keeps (CheckJSON): a text key
// with U+0000 or invalid UTF-8 is a malformed cursor, never a query that
// Postgres refuses.
func parseCursor(c *fiber.Ctx, key any) (bool, error) {
	raw := c.Query("cursor")
	if raw == "" {
		return false, nil
	}
	malformed := Validation("cursor", "cursor is malformed; pass next_cursor from a previous page unchanged")
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || CheckJSON(b) != nil || json.Unmarshal(b, key) != nil {
		return false, malformed
	}
	// A cursor this list issued encodes back to the same bytes; anything
	// else (null, {}, another list's cursor) is not a position here.
	if again, err := json.Marshal(key); err != nil || !bytes.Equal(again, b) {
		return false, malformed
	}
	return true, nil
}

// encodeCursor is the next_cursor for key.
func encodeCursor(key any) *string {
	b, _ := json.Marshal(key)
	s := base64.RawURLEncoding.EncodeToString(b)
	return &s
}

// page builds a Page; when more is true the cursor of the last item is set.
func page[T any](items []T, more bool, keyOf func(T) any) Page[T] {
	if items == nil {
		items = []T{}
	}
	p := Page[T]{Data: items}
	if more && len(items) > 0 {
		p.NextCursor = encodeCursor(keyOf(items[len(items)-1]))
	}
	return p
}
