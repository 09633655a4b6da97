package http

import "github.com/gofiber/fiber/v2"

// docsRoutes serves the API reference page at /docs.
func docsRoutes(app *fiber.App) {
	app.Get("/docs", func(c *fiber.Ctx) error {
		return c.Status(fiber.StatusServiceUnavailable).SendString("docs page not built")
	})
}
