package http

import (
	"context"

	"github.com/gofiber/fiber/v2"
)

// list answers {data: rows} from a read that takes no parameters.
func list[T any](read func(context.Context) ([]T, error)) fiber.Handler {
	return func(c *fiber.Ctx) error {
		rows, err := read(c.UserContext())
		if err != nil {
			return err
		}
		if rows == nil {
			rows = []T{}
		}
		return c.JSON(fiber.Map{"data": rows})
	}
}
