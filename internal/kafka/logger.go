package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Logger passes the Kafka client's own warnings and errors (a partition
// whose produce keeps failing, a broker it cannot reach, a group it cannot
// join) to log, as JSON lines with the service's others. Its info and
// debug lines, one or more per request, stay out unless log is at debug
// level.
func Logger(log *slog.Logger) kgo.Logger { return clientLog{log.With("component", "kafka-client")} }

type clientLog struct{ log *slog.Logger }

func (l clientLog) Level() kgo.LogLevel {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelWarn
}

func (l clientLog) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	case kgo.LogLevelInfo:
		lv = slog.LevelInfo
	}
	l.log.Log(context.Background(), lv, msg, keyvals...)
}
