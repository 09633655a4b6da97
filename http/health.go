package http

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
)

// Check is one readiness probe (Postgres, Redis, Kafka).
type Check struct {
	Name  string
	Check func(ctx context.Context) error
	// Degrades marks a dependency the service works on without (Redis: rate
	// limits fail open, the soft-duplicate check is skipped, keyed POSTs
	// answer 503): its failure makes the instance degraded, still ready.
	// Taking every instance out of service for it would fail every request.
	Degrades bool
}

func healthz(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) }

// readyz answers 200 when every dependency the service needs answers
// within 2 seconds ("ready", or "degraded" when one it can do without
// does not), else 503 ("not ready"). The checks run at once, each with its
// own 2 seconds: one that hangs (a partitioned Redis) does not use up the
// time of the others. The body names the failing dependency; the error
// itself (addresses and all) goes to the log only.
func readyz(checks []Check, log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) error {
		errs := make([]error, len(checks))
		var wg sync.WaitGroup
		for i, ch := range checks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
				defer cancel()
				errs[i] = ch.Check(ctx)
			}()
		}
		wg.Wait()
		results := fiber.Map{}
		status, state := fiber.StatusOK, "ready"
		for i, ch := range checks {
			if err := errs[i]; err != nil {
				results[ch.Name] = "unavailable"
				log.WarnContext(c.UserContext(), "readiness check failed", "dependency", ch.Name, "err", err)
				switch {
				case !ch.Degrades:
					status, state = fiber.StatusServiceUnavailable, "not ready"
				case status == fiber.StatusOK:
					state = "degraded"
				}
			} else {
				results[ch.Name] = "ok"
			}
		}
		return c.Status(status).JSON(fiber.Map{"status": state, "checks": results})
	}
}
