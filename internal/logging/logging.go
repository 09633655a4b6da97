// Package logging builds the JSON slog logger every binary uses.
//
// Two promises:
//   - A record logged with a context (InfoContext, WarnContext, …) that
//     carries a request id (WithRequestID) gets a "request_id" attribute, so
//     every line about one HTTP request can be found by its X-Request-Id.
//   - Secrets stay out: an attribute whose key names a secret, token,
//     password or authorization is replaced by "[REDACTED]", webhook
//     secrets (whsec_…) and passwords in URLs are cut out of any string
//     value. Callers still must not log secrets; this is the safety net.
package logging

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
)

// Redacted replaces a value that must not be logged.
const Redacted = "[REDACTED]"

// New returns a JSON logger at level (debug, info, warn, error).
func New(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(contextHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: redact})})
}

type ctxKey struct{}

// WithRequestID returns ctx carrying the request id id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// RequestID is the request id ctx carries, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// contextHandler adds the context's request id to each record.
type contextHandler struct{ slog.Handler }

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return contextHandler{h.Handler.WithAttrs(as)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{h.Handler.WithGroup(name)}
}

var (
	whsec       = regexp.MustCompile(`whsec_[A-Za-z0-9+/=_-]+`)
	urlPassword = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://[^/\s@:]*:)[^/\s@]*@`)
)

// secretKey reports whether an attribute key names a secret (it runs for
// every attribute of every record, so plain substring tests, no regexp).
func secretKey(key string) bool {
	k := strings.ToLower(key)
	for _, s := range []string{"secret", "token", "passw", "authorization", "apikey", "api_key"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// redact is the JSON handler's ReplaceAttr.
func redact(_ []string, a slog.Attr) slog.Attr {
	if a.Key == "request_id" {
		return a
	}
	if secretKey(a.Key) {
		return slog.String(a.Key, Redacted)
	}
	switch a.Value.Kind() {
	case slog.KindString:
		return slog.String(a.Key, scrub(a.Value.String()))
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			return slog.String(a.Key, scrub(err.Error()))
		}
	}
	return a
}

// scrub cuts webhook secrets and URL passwords out of s.
func scrub(s string) string {
	if strings.Contains(s, "whsec_") {
		s = whsec.ReplaceAllString(s, "whsec_"+Redacted)
	}
	if strings.Contains(s, "@") && strings.Contains(s, "://") {
		s = urlPassword.ReplaceAllString(s, "${1}"+Redacted+"@")
	}
	return s
}
