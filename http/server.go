package http

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/logging"
	catalogrm "github.com/printpod/pod/projections/catalog"
	configrm "github.com/printpod/pod/projections/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

// BodyLimit is the largest request body accepted (413 above it).
const BodyLimit = 1 << 20

// Server holds what the handlers need.
type Server struct {
	Log   *slog.Logger
	Auth  Authenticator
	Redis *redis.Client
	// Pool is the service's database: the Idempotency-Key seeds.
	Pool *pgxpool.Pool
	// Counters are the per-request Redis commands (rate limits), issued
	// through Redis's automatic pipelining so concurrent requests share
	// round trips; Redis when nil.
	Counters  redis.Cmdable
	RateLimit RateLimit
	Catalog   catalogrm.Queries
	Config    configrm.Queries
	Checks    []Check
	Metrics   *Metrics
	Gatherer  prometheus.Gatherer
	Orders    *Orders   // nil: no order endpoints
	Batches   *Batches  // nil: no bulk intake
	Webhooks  *Webhooks // nil: no webhook endpoints
	// ReadTimeout bounds reading one request, and the wait for a new
	// connection's first; default 30s.
	ReadTimeout time.Duration

	methods *methodTable
}

// App builds the Fiber app with every route.
func (s *Server) App() *fiber.App {
	app := s.OpsApp()

	// Public: registered before the /v1 group so no token is asked for.
	app.Get("/v1/openapi.json", openAPI)
	docsRoutes(app)

	counters := s.Counters
	if counters == nil && s.Redis != nil {
		counters = s.Redis
	}
	v1 := app.Group("/v1", requireToken(s.Auth, counters, s.RateLimit, s.Log), rateLimit(counters, s.RateLimit, s.Log), s.methods.gate, checkInput)
	v1.Get("/stores", s.listStores)
	v1.Get("/stores/:store_id/products", s.listProducts)
	v1.Get("/stores/:store_id/products/:product_id", s.getProduct)
	v1.Get("/config/shipping-rates", list(s.Config.ShippingRates))
	v1.Get("/config/pricing-sides", list(s.Config.PricingSides))
	v1.Get("/config/yarn-types", list(s.Config.YarnTypes))
	v1.Get("/config/country-codes", list(s.Config.CountryCodes))
	if s.Orders != nil {
		post := []fiber.Handler{idempotency(s.Redis, s.Pool, s.RateLimit.Prefix, s.Orders.wait(), nil, s.Log)}
		if s.Batches != nil {
			v1.Post(strings.TrimPrefix(batchesPath, "/v1"), append(post, s.Batches.post)...)
			v1.Get("/orders/pod/batches/:batch_id", s.Batches.get)
		}
		v1.Post("/orders/pod", append(post, s.Orders.postOrder)...)
		v1.Get("/orders/pod", s.Orders.listOrders)
		v1.Get("/orders/pod/:order_id", s.Orders.getOrder)
		v1.Get("/orders/pod/:order_id/queue", s.Orders.getQueue)
		v1.Post("/orders/pod/:order_id/retry", append(post, s.Orders.command(order.KindRetry))...)
		v1.Post("/orders/pod/:order_id/cancel", append(post, s.Orders.command(order.KindCancel))...)
	}
	if s.Webhooks != nil {
		s.Webhooks.routes(v1, idempotency(s.Redis, s.Pool, s.RateLimit.Prefix, s.Webhooks.wait(), s.Webhooks.Box, s.Log))
	}
	s.methods.fill(app)
	return app
}

// OpsApp builds the Fiber app with the operational routes only: /healthz,
// /readyz and /metrics. Processes without the api role serve it so every
// instance can be probed and scraped.
func (s *Server) OpsApp() *fiber.App {
	if s.methods == nil {
		s.methods = &methodTable{}
	}
	onError := errorHandler(s.Log, s.methods)
	readTimeout := s.ReadTimeout
	if readTimeout <= 0 {
		readTimeout = 30 * time.Second
	}
	app := fiber.New(fiber.Config{
		AppName:               "podsvc",
		BodyLimit:             BodyLimit,
		ErrorHandler:          onError,
		DisableStartupMessage: true,
		ReadTimeout:           readTimeout,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           2 * time.Minute,
		JSONEncoder:           marshalJSON,
		// A path is one text: /v1/orders/pod/ or /V1/orders/pod is no
		// route (404), not the same handler under a second name that the
		// Idempotency-Key digest and the 405 gate would read apart.
		StrictRouting: true,
		CaseSensitive: true,
	})
	quietOnIdle(app.Server())
	app.Use(recover.New())
	app.Use(requestIDs)
	if s.Metrics != nil {
		app.Use(s.Metrics.middleware(onError, s.methods))
	}
	app.Use(accessLog(s.Log, s.methods))
	app.Use(checkFraming)

	app.Get("/healthz", healthz)
	app.Get("/readyz", readyz(s.Checks, s.Log))
	if s.Gatherer != nil {
		app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(s.Gatherer, promhttp.HandlerOpts{})))
	}
	return app
}

// quietOnIdle wraps the server's handler of requests it could not read.
// A connection that sent nothing (one a client's pool opened and never
// used, past the read timeout, or reset) is closed without an answer, as
// net/http does: an answer nobody asked for can be read by the client as the
// response to its next request on that connection. Every other request is
// answered, one cut short or whose body stalls included. The error does
// not tell them apart (a stalled body's is the read's own timeout too, and
// the request is reset by then), so the connections that sent a byte are
// tracked through the server's connection states. Fiber takes any error
// whose text says "timeout" for one, and fasthttp's text quotes the
// request's bytes, so a malformed request with a header such as
// "Keep-Alive: timeout=5" is passed on as malformed.
func quietOnIdle(srv *fasthttp.Server) {
	var sent sync.Map // net.Conn: it sent at least one byte
	state := srv.ConnState
	srv.ConnState = func(c net.Conn, s fasthttp.ConnState) {
		switch s {
		case fasthttp.StateActive:
			sent.Store(c, struct{}{})
		case fasthttp.StateClosed, fasthttp.StateHijacked:
			sent.Delete(c)
		}
		if state != nil {
			state(c, s)
		}
	}
	answer := srv.ErrorHandler
	srv.ErrorHandler = func(ctx *fasthttp.RequestCtx, err error) {
		if _, ok := sent.Load(ctx.Conn()); !ok {
			_ = ctx.Conn().Close()
			return
		}
		var ne net.Error
		if !(errors.As(err, &ne) && ne.Timeout()) && !errors.As(err, new(*fasthttp.ErrSmallBuffer)) &&
			strings.Contains(err.Error(), "timeout") {
			err = errMalformed
		}
		answer(ctx, err)
	}
}

// errMalformed is a request fasthttp could not read, for Fiber's handler.
var errMalformed = errors.New("malformed request")

// marshalJSON encodes without HTML escaping, so messages read as written.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// requestIDs gives each request an id: the caller's X-Request-Id when it is
// a short printable token, else a new UUID. It is echoed in the response
// header and carried in the request's context, so every log line written
// with that context has it.
func requestIDs(c *fiber.Ctx) error {
	id := c.Get(fiber.HeaderXRequestID)
	if !validRequestID(id) {
		id = uuid.NewString()
	} else {
		id = strings.Clone(id)
	}
	c.Set(fiber.HeaderXRequestID, id)
	c.SetUserContext(logging.WithRequestID(c.UserContext(), id))
	return c.Next()
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if r < '!' || r > '~' {
			return false
		}
	}
	return true
}

// accessLog writes one debug line per request (never headers or bodies, so
// tokens and secrets stay out of logs).
func accessLog(log *slog.Logger, routes *methodTable) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		err := c.Next()
		log.DebugContext(c.UserContext(), "request", "method", c.Method(), "route", routes.routeOf(c),
			"status", c.Response().StatusCode(), "duration_ms", float64(time.Since(start).Microseconds())/1000)
		return err
	}
}
