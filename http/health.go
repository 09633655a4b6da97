package http

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"
)

// Check is one readiness probe (Postgres, Redis, Kafka).
type Check struct {
	Name  string
	Check func(ctx context.Context) error
}

func healthz(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) }

// readyz answers 200 only when every dependency answers within 2 seconds.
func readyz(checks []Check) fiber.Handler {
	return func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
		defer cancel()
		results := fiber.Map{}
		ready := true
		for _, ch := range checks {
			if err := ch.Check(ctx); err != nil {
				ready = false
				results[ch.Name] = err.Error()
			} else {
				results[ch.Name] = "ok"
			}
		}
		status := fiber.StatusOK
		state := "ready"
		if !ready {
			status = fiber.StatusServiceUnavailable
			state = "not ready"
		}
		return c.Status(status).JSON(fiber.Map{"status": state, "checks": results})
	}
}
