// Package logging builds the JSON slog logger every binary uses.
package logging

import (
	"io"
	"log/slog"
)

// New returns a JSON logger at level (debug, info, warn, error).
func New(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
