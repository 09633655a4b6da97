package http

import (
	"github.com/gofiber/fiber/v2"
	"github.com/printpod/pod/schemas"
)

// openAPI serves the OpenAPI document. It needs no token, so the docs page
// and client generators can read it.
func openAPI(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
	c.Set(fiber.HeaderCacheControl, "public, max-age=300")
	return c.Send(schemas.OpenAPI)
}
