package http

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"path"
	"strconv"
	"strings"

	json "github.com/go-json-experiment/json/v1"
	"github.com/gofiber/fiber/v2"
	"github.com/printpod/pod/schemas"
)

// The docs page's renderer (Redoc's standalone bundle), copied here from
// web/docs by `make docs`. Only a placeholder README.md is committed, so this
// always compiles; manifest.json, written last by the build, says what was
// built.
//
//go:embed docsassets
var docsAssetsFS embed.FS

//go:embed docs.html
var docsPageTemplate string

// docsNotBuilt is the body of /docs when the binary was built without the
// renderer.
const docsNotBuilt = "docs page not built: run make docs"

// docsCSP is the Content-Security-Policy of /docs: scripts only from this
// origin (no inline script, no eval), data only from this origin, no frames,
// forms or plugins. Redoc needs inline styles (styled-components injects
// <style> elements and React sets style attributes) and runs its search
// index in a worker it starts from a blob: URL; its icons are data: SVGs.
// It loads no fonts (the page asks for the system's), so none are allowed.
// (A style nonce does not work: Redoc reads it from an attribute of <redoc>,
// and browsers hide nonce attributes from scripts.)
const docsCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; connect-src 'self'; worker-src blob:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Cache-Control of the content-hashed renderer bundle, and of other assets.
const (
	docsImmutableCache = "public, max-age=31536000, immutable"
	docsShortCache     = "public, max-age=3600"
)

type docsManifest struct {
	Renderer string   `json:"renderer"`
	Version  string   `json:"version"`
	Script   string   `json:"script"`
	Files    []string `json:"files"`
}

type docsAsset struct {
	body, gzip   []byte
	contentType  string
	cacheControl string
}

// docsSite is the docs page and its assets, read once from the embedded
// files. page is nil when the renderer was not built.
type docsSite struct {
	page   []byte
	assets map[string]docsAsset
}

// loadDocs reads the embedded build. A missing manifest means "not built"
// (nil page, nil error); a manifest that names missing files is an error.
func loadDocs(fsys fs.FS, pageTemplate string, openapi []byte) (docsSite, error) {
	raw, err := fs.ReadFile(fsys, "manifest.json")
	if err != nil {
		return docsSite{}, nil
	}
	var m docsManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return docsSite{}, fmt.Errorf("docs manifest: %w", err)
	}
	if m.Script == "" {
		return docsSite{}, fmt.Errorf("docs manifest names no script")
	}
	site := docsSite{assets: map[string]docsAsset{}}
	for _, name := range m.Files {
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return docsSite{}, fmt.Errorf("docs asset %s: %w", name, err)
		}
		a := docsAsset{body: body, contentType: docsContentType(name), cacheControl: docsShortCache}
		if name == m.Script {
			a.cacheControl = docsImmutableCache // the name carries the content hash
		}
		if gz, err := fs.ReadFile(fsys, name+".gz"); err == nil {
			a.gzip = gz
		}
		site.assets[name] = a
	}
	if _, ok := site.assets[m.Script]; !ok {
		return docsSite{}, fmt.Errorf("docs manifest: script %s is not among its files", m.Script)
	}

	tmpl, err := template.New("docs").Parse(pageTemplate)
	if err != nil {
		return docsSite{}, fmt.Errorf("docs page template: %w", err)
	}
	var buf bytes.Buffer
	err = tmpl.Execute(&buf, struct{ Title, Version, Script string }{
		Title: docsTitle(openapi), Version: m.Version, Script: m.Script,
	})
	if err != nil {
		return docsSite{}, fmt.Errorf("docs page template: %w", err)
	}
	site.page = buf.Bytes()
	return site, nil
}

// docsTitle is the document's info.title, for the page's <title>.
func docsTitle(openapi []byte) string {
	var doc struct {
		Info struct {
			Title string `json:"title"`
		} `json:"info"`
	}
	if json.Unmarshal(openapi, &doc) != nil || doc.Info.Title == "" {
		return "API"
	}
	return doc.Info.Title
}

func docsContentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".json":
		return fiber.MIMEApplicationJSONCharsetUTF8
	default:
		return fiber.MIMETextPlainCharsetUTF8
	}
}

// docsRoutes serves the API reference page at /docs and its embedded
// renderer at /docs/assets/<name>. Neither needs a token.
func docsRoutes(app *fiber.App) {
	sub, err := fs.Sub(docsAssetsFS, "docsassets")
	if err != nil {
		panic(err) // the embed pattern names this directory
	}
	site, err := loadDocs(sub, docsPageTemplate, schemas.OpenAPI)
	if err != nil {
		// Only a broken `make docs` output gets here: say so on the page
		// rather than stop the service.
		msg := docsNotBuilt + " (" + err.Error() + ")"
		app.Get("/docs", docsUnavailable(msg))
		app.Get("/docs/assets/:name", docsUnavailable(msg))
		return
	}
	if site.page == nil {
		app.Get("/docs", docsUnavailable(docsNotBuilt))
		app.Get("/docs/assets/:name", docsUnavailable(docsNotBuilt))
		return
	}

	app.Get("/docs", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
		c.Set(fiber.HeaderContentSecurityPolicy, docsCSP)
		c.Set(fiber.HeaderCacheControl, "no-cache")
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
		c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
		return c.Send(site.page)
	})
	app.Get("/docs/assets/:name", func(c *fiber.Ctx) error {
		a, ok := site.assets[c.Params("name")]
		if !ok {
			return fiber.ErrNotFound
		}
		c.Set(fiber.HeaderContentType, a.contentType)
		c.Set(fiber.HeaderCacheControl, a.cacheControl)
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
		if a.gzip != nil {
			c.Vary(fiber.HeaderAcceptEncoding)
			if acceptsGzip(c.Get(fiber.HeaderAcceptEncoding)) {
				c.Set(fiber.HeaderContentEncoding, "gzip")
				return c.Send(a.gzip)
			}
		}
		return c.Send(a.body)
	})
}

func docsUnavailable(msg string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderCacheControl, "no-store")
		c.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
		return c.Status(fiber.StatusServiceUnavailable).SendString(msg)
	}
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip (Fiber's
// AcceptsEncodings takes a missing header as "anything", which would send
// gzip to clients that never asked for it).
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "*" {
			continue
		}
		name, value, _ := strings.Cut(strings.TrimSpace(params), "=")
		if strings.TrimSpace(name) == "q" {
			q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			return err == nil && q > 0
		}
		return true
	}
	return false
}
