package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"image"
	"image/png"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	json "github.com/go-json-experiment/json/v1"
	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/podtest"
)

// chromiumPath is Debian's Chromium, installed by deploy/local/chromium.sh
// (which `make test` runs).
const chromiumPath = "/usr/bin/chromium"

// The browser window's width, and the most of the page's height the
// screenshot keeps: the whole document rendered is tens of thousands of
// pixels tall, and its top shows the layout, the sidebar and the first
// operations.
const (
	docsViewportWidth = 1280
	docsShotMaxHeight = 3200
)

// TestDocsPage opens /docs in headless Chromium and checks that the embedded
// renderer draws the served OpenAPI document (its title and every operation
// summary), that the page asks nothing of any other origin, that its
// Content-Security-Policy is not violated, and that it looks like something:
// a full-page screenshot (up to docsShotMaxHeight), written to
// $POD_DOCS_SCREENSHOT when set.
func TestDocsPage(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("this test drives Chromium, and %s is missing (%v): install it with "+
			"`bash deploy/local/chromium.sh` (apt-get install -y --no-install-recommends chromium); `make test` does",
			chromiumPath, err)
	}
	cfg := podtest.Config(t)
	cfg.Roles = []string{config.RoleAPI}
	a := podtest.Start(t, cfg)
	origin := "http://" + a.Addr()

	script := checkDocsHeaders(t, origin)
	title, ops := readOpenAPIOperations(t, origin+"/v1/openapi.json")
	t.Logf("document %q: %d operations with a summary", title, len(ops))

	b := openDocsPage(t, origin, title, ops)
	for _, l := range b.logs {
		t.Logf("browser log: %s", l)
	}

	// Rendered: the title and every operation summary are on the page.
	if !strings.Contains(b.text, title) {
		t.Errorf("the page does not show the API title %q; its text begins:\n%s", title, head(b.text, 1500))
	}
	if want := title + " · API reference"; b.docTitle != want {
		t.Errorf("document.title = %q, want %q", b.docTitle, want)
	}
	var missing []string
	for _, op := range ops {
		if !strings.Contains(b.text, op.Summary) {
			missing = append(missing, fmt.Sprintf("%s %s %q", op.Method, op.Path, op.Summary))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d operation summaries are not on the page:\n  %s", len(missing), len(ops), strings.Join(missing, "\n  "))
	}

	// Nothing left the host: every request went to the service's origin (or
	// was a data: or blob: URL), and the renderer really came from there.
	var offsite []string
	for _, r := range b.requests {
		if !sameOriginOrLocal(r, origin) {
			offsite = append(offsite, r)
		}
	}
	if len(offsite) > 0 {
		t.Errorf("the page requested %d URLs off %s:\n  %s", len(offsite), origin, strings.Join(offsite, "\n  "))
	}
	for _, want := range []string{origin + "/docs", origin + script, origin + "/v1/openapi.json"} {
		if !slices.Contains(b.requests, want) {
			t.Errorf("the browser never requested %s; it requested:\n  %s", want, strings.Join(b.requests, "\n  "))
		}
	}
	for u, status := range b.statuses {
		if status != http.StatusOK && sameOriginOrLocal(u, origin) && !strings.HasPrefix(u, "blob:") {
			t.Errorf("GET %s answered %d in the browser", u, status)
		}
	}
	if len(b.cspViolations) > 0 {
		t.Errorf("Content-Security-Policy violations:\n  %s", strings.Join(b.cspViolations, "\n  "))
	}
	if len(b.exceptions) > 0 {
		t.Errorf("uncaught exceptions on the page:\n  %s", strings.Join(b.exceptions, "\n  "))
	}
	if len(b.failures) > 0 {
		t.Errorf("failed loads:\n  %s", strings.Join(b.failures, "\n  "))
	}

	// The screenshot is a real picture.
	checkScreenshot(t, b.screenshot)
	out := os.Getenv("POD_DOCS_SCREENSHOT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "docs-page.png")
	} else if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b.screenshot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d KiB)", out, len(b.screenshot)/1024)
}

// checkDocsHeaders checks /docs (built, strict CSP, not cached) and the
// renderer it loads (content-hashed name, cached for a year, gzip when
// asked), and returns the renderer's path.
func checkDocsHeaders(t *testing.T, origin string) string {
	t.Helper()
	res, body := docsGet(t, origin+"/docs", "")
	if res.StatusCode == http.StatusServiceUnavailable {
		t.Fatalf("GET /docs: 503 %q: podsvc was built without the docs page's renderer: run `make docs` "+
			"(npm ci in web/docs, then a copy into http/docsassets), then test again", body)
	}
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /docs: %d %s\n%s", res.StatusCode, res.Header.Get("Content-Type"), head(string(body), 500))
	}
	csp := parseCSP(res.Header.Get("Content-Security-Policy"))
	for directive, want := range map[string][]string{
		"default-src":     {"'none'"},
		"script-src":      {"'self'"},
		"connect-src":     {"'self'"},
		"base-uri":        {"'none'"},
		"frame-ancestors": {"'none'"},
	} {
		if got := csp[directive]; !slices.Equal(got, want) {
			t.Errorf("CSP %s = %q, want %q (whole header: %q)", directive, got, want, res.Header.Get("Content-Security-Policy"))
		}
	}
	for directive, sources := range csp {
		for _, s := range sources {
			if s == "*" || s == "'unsafe-eval'" || strings.Contains(s, "://") || s == "https:" || s == "http:" ||
				s == "'unsafe-inline'" && directive != "style-src" {
				t.Errorf("CSP %s allows %s", directive, s)
			}
		}
	}
	if cc := res.Header.Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("/docs Cache-Control = %q, want no-cache (so a new build's asset names are picked up)", cc)
	}

	m := regexp.MustCompile(`<script src="(/docs/assets/[^"]+)"`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("/docs loads no script from /docs/assets:\n%s", body)
	}
	script := string(m[1])
	if !regexp.MustCompile(`\.[0-9a-f]{12}\.js$`).MatchString(script) {
		t.Errorf("renderer %s has no content hash in its name", script)
	}
	plain, plainBody := docsGet(t, origin+script, "identity")
	gz, gzBody := docsGet(t, origin+script, "br, gzip")
	for _, ae := range []string{"", "gzip;q=0", "br"} {
		r, body := docsGet(t, origin+script, ae)
		if r.Header.Get("Content-Encoding") != "" || !bytes.Equal(body, plainBody) {
			t.Errorf("%s with Accept-Encoding %q: Content-Encoding %q, %d bytes (plain: %d)",
				script, ae, r.Header.Get("Content-Encoding"), len(body), len(plainBody))
		}
	}
	for _, r := range []*http.Response{plain, gz} {
		if r.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", script, r.StatusCode)
		}
		if cc := r.Header.Get("Cache-Control"); !strings.Contains(cc, "max-age=31536000") || !strings.Contains(cc, "immutable") {
			t.Errorf("%s Cache-Control = %q, want a year and immutable", script, cc)
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
			t.Errorf("%s Content-Type = %q", script, ct)
		}
	}
	if plain.Header.Get("Content-Encoding") != "" || gz.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("%s Content-Encoding: %q without gzip asked, %q with", script, plain.Header.Get("Content-Encoding"), gz.Header.Get("Content-Encoding"))
	} else if zr, err := gzip.NewReader(bytes.NewReader(gzBody)); err != nil {
		t.Errorf("%s gzip: %v", script, err)
	} else if unzipped, err := io.ReadAll(zr); err != nil || !bytes.Equal(unzipped, plainBody) {
		t.Errorf("%s: the gzip body differs from the plain one (%v)", script, err)
	}
	if r, _ := docsGet(t, origin+"/docs/assets/nothing.js", ""); r.StatusCode != http.StatusNotFound {
		t.Errorf("GET /docs/assets/nothing.js: %d, want 404", r.StatusCode)
	}
	return script
}

// docsGet GETs u with the given Accept-Encoding (none when empty), and
// returns the body as sent.
func docsGet(t *testing.T, u, acceptEncoding string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	res, err := docsClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, body
}

// docsClient neither asks for gzip by itself nor decompresses.
var docsClient = &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 30 * time.Second}

func parseCSP(header string) map[string][]string {
	out := map[string][]string{}
	for _, d := range strings.Split(header, ";") {
		f := strings.Fields(d)
		if len(f) > 0 {
			out[strings.ToLower(f[0])] = f[1:]
		}
	}
	return out
}

type docsOperation struct{ Method, Path, Summary string }

// readOpenAPIOperations reads the served document's title and its operations
// that have a summary, in the document's order: those of its paths, then
// those of its webhooks (OpenAPI 3.1).
func readOpenAPIOperations(t *testing.T, u string) (string, []docsOperation) {
	t.Helper()
	res, body := docsGet(t, u, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, res.StatusCode, head(string(body), 300))
	}
	var doc struct {
		Info struct {
			Title string `json:"title"`
		} `json:"info"`
		Paths    json.RawMessage `json:"paths"`
		Webhooks json.RawMessage `json:"webhooks"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.Info.Title == "" {
		t.Fatalf("openapi.json has no info.title")
	}
	methods := []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}
	var ops []docsOperation
	for _, group := range []struct {
		name, prefix string
		raw          json.RawMessage
	}{{"paths", "", doc.Paths}, {"webhooks", "webhook ", doc.Webhooks}} {
		if len(group.raw) == 0 {
			continue
		}
		items, err := orderedObject(group.raw)
		if err != nil {
			t.Fatalf("openapi.json %s: %v", group.name, err)
		}
		for _, item := range items {
			members, err := orderedObject(item.value)
			if err != nil {
				t.Fatalf("openapi.json %s %s: %v", group.name, item.key, err)
			}
			for _, m := range members {
				if !slices.Contains(methods, m.key) {
					continue
				}
				var op struct {
					Summary string `json:"summary"`
				}
				if err := json.Unmarshal(m.value, &op); err != nil {
					t.Fatalf("openapi.json %s %s %s: %v", group.name, item.key, m.key, err)
				}
				if s := strings.Join(strings.Fields(op.Summary), " "); s != "" {
					ops = append(ops, docsOperation{strings.ToUpper(m.key), group.prefix + item.key, s})
				}
			}
		}
	}
	return doc.Info.Title, ops
}

type member struct {
	key   string
	value json.RawMessage
}

// orderedObject returns the members of a JSON object in document order.
func orderedObject(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not an object (%v)", err)
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, member{tok.(string), v})
	}
	return out, nil
}

// docsBrowse is what the browser saw of /docs.
type docsBrowse struct {
	text, docTitle string
	screenshot     []byte
	requests       []string       // every URL the page requested, in order
	statuses       map[string]int // response status by URL
	failures       []string       // loads that failed, with the reason
	exceptions     []string
	cspViolations  []string
	logs           []string // the browser's warnings and errors
}

// openDocsPage opens /docs in headless Chromium, waits until the renderer
// drew the document (its first operation's summary, or its title when it
// has no operation), and reads the page.
func openDocsPage(t *testing.T, origin, title string, ops []docsOperation) docsBrowse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		// This machine's network is closed: Chromium must not try to reach
		// Google's services by itself.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()

	var (
		mu   sync.Mutex
		seen = docsBrowse{statuses: map[string]int{}}
		urls = map[network.RequestID]string{}
	)
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithListener(func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			urls[ev.RequestID] = ev.Request.URL
			seen.requests = append(seen.requests, ev.Request.URL)
		case *network.EventResponseReceived:
			seen.statuses[ev.Response.URL] = int(ev.Response.Status)
		case *network.EventLoadingFailed:
			seen.failures = append(seen.failures, fmt.Sprintf("%s: %s %s", urls[ev.RequestID], ev.ErrorText, ev.BlockedReason))
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg += " " + d.Exception.Description
			}
			seen.exceptions = append(seen.exceptions, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber+1, msg))
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError || ev.Entry.Level == cdplog.EntryLevelWarning {
				seen.logs = append(seen.logs, fmt.Sprintf("%s %s: %s %s", ev.Entry.Level, ev.Entry.Source, ev.Entry.URL, ev.Entry.Text))
			}
		}
	}))
	defer cancelBrowser()

	// Collect CSP violations as the page sees them (a script added through
	// the protocol is not subject to the page's CSP).
	const watchCSP = `window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', e => window.__cspViolations.push(
  e.effectiveDirective + ' blocked ' + (e.blockedURI || 'inline') + ' at ' + e.sourceFile + ':' + e.lineNumber));`
	err := chromedp.Do(browserCtx,
		chromedp.EmulateViewport(docsViewportWidth, 900),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: watchCSP})
			return err
		}),
		chromedp.Navigate(origin+"/docs"),
	)
	if err != nil {
		t.Fatalf("open %s/docs in %s: %v", origin, chromiumPath, err)
	}

	marker := title
	if len(ops) > 0 {
		marker = ops[0].Summary
	}
	lit, _ := json.Marshal(marker)
	// Generous: Redoc draws the whole document at once, and this machine's
	// two cores are often shared with compilers and other tests.
	waitCtx, cancelWait := context.WithTimeout(browserCtx, 90*time.Second)
	start := time.Now()
	_, err = chromedp.Run(waitCtx, chromedp.Poll[bool](
		`!!document.body && document.body.innerText.includes(`+string(lit)+`)`,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(0)))
	cancelWait()
	if err != nil {
		text, _ := chromedp.Run(browserCtx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the docs page did not show %q: %v\npage text:\n%s\nrequests: %q\nexceptions: %q\nfailed loads: %q",
			marker, err, head(text, 2000), seen.requests, seen.exceptions, seen.failures)
	}
	t.Logf("the page showed %q %v after it loaded", marker, time.Since(start).Round(time.Millisecond))
	// Redoc draws the whole document in one pass; let the search worker and
	// layout settle before reading the page and taking the picture.
	_, _ = chromedp.Run(browserCtx, chromedp.Evaluate[chromedp.Void](
		`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 300))))`, chromedp.EvalAwaitPromise))

	text, err := chromedp.Run(browserCtx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	docTitle, err := chromedp.Run(browserCtx, chromedp.Evaluate[string](`document.title`))
	if err != nil {
		t.Fatal(err)
	}
	violations, err := chromedp.Run(browserCtx, chromedp.Evaluate[[]string](`window.__cspViolations || ['the CSP watcher did not run']`))
	if err != nil {
		t.Fatal(err)
	}
	height, err := chromedp.Run(browserCtx, chromedp.Evaluate[float64](`document.documentElement.scrollHeight`))
	if err != nil {
		t.Fatal(err)
	}
	if height > docsShotMaxHeight {
		t.Logf("the page is %.0f px tall: the screenshot keeps its top %d px", height, docsShotMaxHeight)
		height = docsShotMaxHeight
	}
	shot, err := chromedp.Run(browserCtx, func(ctx context.Context, tg *chromedp.Target) ([]byte, error) {
		res, err := cdp.Call(ctx, tg, page.CaptureScreenshot, page.CaptureScreenshotParams{
			Format:                page.CaptureScreenshotFormatPng,
			Clip:                  &page.Viewport{Width: docsViewportWidth, Height: height, Scale: 1},
			CaptureBeyondViewport: new(true),
			FromSurface:           new(true),
		})
		return res.Data, err
	})
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	seen.text = strings.Join(strings.Fields(text), " ")
	seen.docTitle = docTitle
	seen.cspViolations = violations
	seen.screenshot = shot
	return docsBrowse{
		text: seen.text, docTitle: seen.docTitle, screenshot: seen.screenshot,
		requests: slices.Clone(seen.requests), statuses: maps.Clone(seen.statuses),
		failures: slices.Clone(seen.failures), exceptions: slices.Clone(seen.exceptions),
		cspViolations: seen.cspViolations, logs: slices.Clone(seen.logs),
	}
}

func sameOriginOrLocal(raw, origin string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "data", "blob":
		return true
	}
	return u.Scheme+"://"+u.Host == origin
}

// checkScreenshot decodes the PNG and checks it is a picture of something:
// large enough, and neither one colour nor nearly so.
func checkScreenshot(t *testing.T, b []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	r := img.Bounds()
	if r.Dx() < 800 || r.Dy() < 600 {
		t.Errorf("screenshot is %dx%d", r.Dx(), r.Dy())
	}
	colours := map[[3]uint32]int{}
	samples := 0
	for y := r.Min.Y; y < r.Max.Y; y += 3 {
		for x := r.Min.X; x < r.Max.X; x += 3 {
			c := rgb(img, x, y)
			colours[c]++
			samples++
		}
	}
	top := 0
	for _, n := range colours {
		top = max(top, n)
	}
	if len(colours) < 16 || top*100 > samples*98 {
		t.Errorf("screenshot looks blank: %d colours, the commonest covers %d%% of it", len(colours), top*100/max(samples, 1))
	}
}

func rgb(img image.Image, x, y int) [3]uint32 {
	r, g, b, _ := img.At(x, y).RGBA()
	return [3]uint32{r >> 8, g >> 8, b >> 8}
}

func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
