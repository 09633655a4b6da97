package logging

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	json "github.com/go-json-experiment/json/v1"
)

func TestRequestIDAndRedaction(t *testing.T) {
	cases := []struct {
		name  string
		log   func(l *slog.Logger)
		want  map[string]any
		never []string
	}{
		{
			name: "request id from the context",
			log:  func(l *slog.Logger) { l.InfoContext(WithRequestID(context.Background(), "req-42"), "hello", "n", 1) },
			want: map[string]any{"msg": "hello", "request_id": "req-42", "n": float64(1)},
		},
		{
			name: "no request id without one in the context",
			log:  func(l *slog.Logger) { l.Info("plain") },
			want: map[string]any{"msg": "plain"},
		},
		{
			name: "keys naming secrets",
			log: func(l *slog.Logger) {
				l.Info("x", "token", "tok-abc", "secret", "s3", "Authorization", "Bearer zz", "db_password", "pw")
			},
			want:  map[string]any{"token": Redacted, "secret": Redacted, "Authorization": Redacted, "db_password": Redacted},
			never: []string{"tok-abc", "s3", "Bearer zz", `"pw"`},
		},
		{
			name: "webhook secret inside a value and an error",
			log: func(l *slog.Logger) {
				l.Warn("x", "detail", "got whsec_QUJDRA== back", "err", errors.New("bad whsec_ZZZ+/9"))
			},
			want:  map[string]any{"detail": "got whsec_" + Redacted + " back", "err": "bad whsec_" + Redacted},
			never: []string{"QUJDRA", "ZZZ+/9"},
		},
		{
			name: "password in a URL",
			log: func(l *slog.Logger) {
				l.Error("x", "err", errors.New("dial postgres://app:hunter2@db:5432/pod failed"))
			},
			want:  map[string]any{"err": "dial postgres://app:" + Redacted + "@db:5432/pod failed"},
			never: []string{"hunter2"},
		},
		{
			name:  "password in an upper-case or malformed URL",
			log:   func(l *slog.Logger) { l.Error("x", "a", "POSTGRES://u:s3cr%zz@h/db", "b", "redis://:pw9@h:6379/0") },
			want:  map[string]any{"a": "POSTGRES://u:" + Redacted + "@h/db", "b": "redis://:" + Redacted + "@h:6379/0"},
			never: []string{"s3cr", "pw9"},
		},
		{
			name: "attributes added with With keep the request id",
			log: func(l *slog.Logger) {
				l.With("component", "delivery").WarnContext(WithRequestID(context.Background(), "r1"), "w")
			},
			want: map[string]any{"component": "delivery", "request_id": "r1"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tc.log(New(&buf, "debug"))
			line := buf.String()
			var got map[string]any
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatalf("not one JSON line: %q", line)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v (line %s)", k, got[k], v, line)
				}
			}
			if _, ok := tc.want["request_id"]; !ok {
				if _, has := got["request_id"]; has {
					t.Errorf("unexpected request_id in %s", line)
				}
			}
			for _, s := range tc.never {
				if strings.Contains(line, s) {
					t.Errorf("%q leaked: %s", s, line)
				}
			}
		})
	}
}
