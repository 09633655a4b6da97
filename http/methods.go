package http

import (
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/printpod/pod/schemas"
)

// methodTable knows which methods each route path answers, so a path that
// exists answers 405 with Allow for any other method, also where a route
// with a parameter ({order_id}) could take the same segment: the path
// /v1/orders/pod/batches is a path of its own, never an order id.
type methodTable struct {
	static map[string][]string // path without parameters -> methods
	routes []routeMethods
	// endpoints holds the method and path of every endpoint route (not
	// middleware), to tell them from the group middleware Fiber reports
	// as the route of a request refused before its handler.
	endpoints map[endpoint]bool
}

type endpoint struct{ method, path string }

type routeMethods struct {
	path     string
	segments []string
	methods  []string
}

// fill reads the app's routes; call it once every route is registered.
func (t *methodTable) fill(app *fiber.App) {
	byPath := map[string][]string{}
	var paths []string
	for _, r := range app.GetRoutes(true) {
		if _, ok := byPath[r.Path]; !ok {
			paths = append(paths, r.Path)
		}
		if !slices.Contains(byPath[r.Path], r.Method) {
			byPath[r.Path] = append(byPath[r.Path], r.Method)
		}
	}
	t.static = map[string][]string{}
	t.endpoints = map[endpoint]bool{}
	for _, p := range paths {
		for _, m := range byPath[p] {
			t.endpoints[endpoint{m, p}] = true
		}
		methods := byPath[p]
		slices.Sort(methods)
		if !strings.ContainsAny(p, ":*") {
			t.static[p] = methods
		}
		t.routes = append(t.routes, routeMethods{path: p, segments: strings.Split(p, "/"), methods: methods})
	}
}

// allowed lists the methods path answers: a static route's own, else those
// of every route template that matches it.
func (t *methodTable) allowed(path string) []string {
	if m, ok := t.static[path]; ok {
		return m
	}
	segs := strings.Split(path, "/")
	var out []string
	for _, r := range t.routes {
		if matchSegments(r.segments, segs) {
			for _, m := range r.methods {
				if !slices.Contains(out, m) {
					out = append(out, m)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// routeOf is the route template of a request for metrics and logs: the
// endpoint that answered it, or, for a request refused by middleware (401,
// 429, 405) or by no route (404), the template its path matches, else
// "unmatched".
func (t *methodTable) routeOf(c *fiber.Ctx) string {
	if r := c.Route(); r != nil && t.endpoints[endpoint{r.Method, r.Path}] {
		return r.Path
	}
	// The path is request memory Fiber reuses: return templates only.
	path := c.Path()
	for _, r := range t.routes {
		if r.path == path {
			return r.path
		}
	}
	segs := strings.Split(path, "/")
	for _, r := range t.routes {
		if matchSegments(r.segments, segs) {
			return r.path
		}
	}
	return "unmatched"
}

func matchSegments(tmpl, segs []string) bool {
	for i, s := range tmpl {
		if s == "*" || strings.HasPrefix(s, "*") {
			return true
		}
		if i >= len(segs) {
			return false
		}
		if !strings.HasPrefix(s, ":") && s != segs[i] {
			return false
		}
	}
	return len(tmpl) == len(segs)
}

func methodNotAllowed(c *fiber.Ctx, allowed []string) *Error {
	allow := strings.Join(allowed, ", ")
	c.Set(fiber.HeaderAllow, allow)
	return &Error{Code: schemas.CodeMethodNotAllowed,
		Message: "method not allowed on this endpoint; allowed: " + allow}
}

// gate answers 405 for a static path asked with a method it lacks, before
// a parameter route could take the request.
func (t *methodTable) gate(c *fiber.Ctx) error {
	if m, ok := t.static[c.Path()]; ok && !slices.Contains(m, c.Method()) {
		return methodNotAllowed(c, m)
	}
	return c.Next()
}
