package http

import (
	"context"
	"log/slog"
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
// The body names the failing dependency; the error itself (addresses and
// all) goes to the log only.
func readyz(checks []Check, log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
		defer cancel()
		results := fiber.Map{}
		ready := true
		for _, ch := range checks {
			if err := ch.Check(ctx); err != nil {
				ready = false
				results[ch.Name] = "unavailable"
				log.WarnContext(ctx, "readiness check failed", "dependency", ch.Name, "err", err)
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
