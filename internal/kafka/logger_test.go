package kafka

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestTheClientLogKeepsWarningsAndLeavesChatterOut(t *testing.T) {
	tests := []struct {
		name    string
		service slog.Level   // the service's log level
		level   kgo.LogLevel // the client's line
		written string       // the JSON level written, "" for none
	}{
		{"a warning is written at info", slog.LevelInfo, kgo.LogLevelWarn, "WARN"},
		{"an error is written at info", slog.LevelInfo, kgo.LogLevelError, "ERROR"},
		{"an info line is left out at info", slog.LevelInfo, kgo.LogLevelInfo, ""},
		{"a debug line is left out at info", slog.LevelInfo, kgo.LogLevelDebug, ""},
		{"a debug line is written at debug", slog.LevelDebug, kgo.LogLevelDebug, "DEBUG"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := Logger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tt.service})))
			if tt.level <= l.Level() { // the client calls Log only for levels its Level allows
				l.Log(tt.level, "produce partition load error", "partition", 3)
			}
			got := buf.String()
			switch {
			case tt.written == "" && got != "":
				t.Fatalf("written: %s", got)
			case tt.written != "" && (!strings.Contains(got, `"level":"`+tt.written+`"`) || !strings.Contains(got, `"partition":3`) ||
				!strings.Contains(got, `"component":"kafka-client"`)):
				t.Fatalf("written %q, want a %s line with its fields", got, tt.written)
			}
		})
	}
}
