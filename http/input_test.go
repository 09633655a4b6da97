package http

import (
	"strings"
	"testing"
)

func TestCheckJSON(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		field string // "" with ok: accepted
		ok    bool
	}{
		{name: "a plain object is accepted", body: `{"a":"b","n":[1,2,{"c":null}]}`, ok: true},
		{name: "escaped non-ASCII text is accepted", body: `{"a":"caf\u00e9 \ud83d\ude00"}`, ok: true},
		{name: "a NUL escape in a value names its field", body: `{"a":{"b":["x","y\u0000"]}}`, field: "a.b[1]"},
		{name: "a raw NUL byte in a string is not JSON", body: "{\"note\":\"x\x00\"}", field: ""},
		{name: "a NUL in a key names the key", body: `{"a":{"k\u0000":1}}`, field: "a.k\x00"},
		{name: "invalid UTF-8 in a value names its field", body: "{\"a\":1,\"note\":\"\xff\"}", field: "note"},
		{name: "invalid UTF-8 in a key names the key", body: "{\"a\":{\"\xc3(\":1}}", field: "a.\ufffd("},
		{name: "a lone high surrogate escape names its field", body: `{"a":1,"note":"R-\ud800"}`, field: "note"},
		{name: "a lone low surrogate escape names its field", body: `{"t":["x","\udc00y"]}`, field: "t[1]"},
		{name: "a high surrogate escape before a character that is not a low one names its field", body: `{"n":"\ud83d\u0041"}`, field: "n"},
		{name: "a lone surrogate escape in a key names the key", body: `{"a":{"k\ud800":1}}`, field: "a.k\ufffd"},
		{name: "an escaped backslash before u is no escape", body: `{"a":"\\ud800"}`, ok: true},
		{name: "a key given twice names the key", body: `{"x":{"a":1,"a":2}}`, field: "x.a"},
		{name: "the same key in two objects is accepted", body: `[{"a":1},{"a":2}]`, ok: true},
		{name: "a number beyond float64 names its field", body: `{"q":[1e999]}`, field: "q[0]"},
		{name: "nesting past the limit is refused", body: strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1), field: strings.Repeat("[0]", MaxJSONDepth)},
		{name: "nesting at the limit is accepted", body: strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth), ok: true},
		{name: "two top-level values are refused", body: `{} {}`, field: ""},
		{name: "a syntax error is refused", body: `{"a":}`, field: ""},
		{name: "a truncated body is refused", body: `{"a":[1,`, field: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckJSON([]byte(c.body))
			if c.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if err.Status() != 400 || err.Code != "VALIDATION_ERROR" {
				t.Fatalf("answer %d %s", err.Status(), err.Code)
			}
			got, _ := err.Details["field"].(string)
			if got != c.field {
				t.Fatalf("field %q, want %q (%s)", got, c.field, err.Message)
			}
		})
	}
}

// FuzzPlainJSONPassesTheWalk checks CheckJSON's fast path: every body
// plainJSON vouches for passes the token walk too.
func FuzzPlainJSONPassesTheWalk(f *testing.F) {
	for _, s := range []string{
		`{"a":"b","n":[1,2,{"c":null}]}`, `{"a":"caf\u00e9 \ud83d\ude00"}`, `{"a":"\\u0000"}`, `{"a":"\u0000"}`,
		`{"a":"\ud800"}`, "{\"a\":\"\xff\"}", `{"x":{"a":1,"a":2}}`, `[{"a":1},{"a":2}]`, `{"q":[1e999]}`,
		`{"q":[-0.5, 12345678901234567890, 123456789012345678901]}`, `{"q":1E5}`, `{} {}`, `{"a":}`, `[1,`,
		`"text"`, `  null `, `{"a":"\"{[[["}`, strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth),
		strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !plainJSON(body) {
			return
		}
		if err := walkJSON(body); err != nil {
			t.Fatalf("plainJSON passes %q, the walk refuses it: %v", body, err)
		}
	})
}

// TestPlainJSONTakesWellFormedBodies keeps the fast path in use for the
// bodies clients send.
func TestPlainJSONTakesWellFormedBodies(t *testing.T) {
	for _, body := range []string{
		`{"reference_id":"R-1","customer":{"email":"ann@example.com"},"line_items":[{"variant_id":"10000000-0000-0000-0000-000000000001","quantity":2,"sides":{"front_side":"https://img.example/a.png"}}]}`,
		`{"url":"https://hooks.example/a","topics":["order.created"],"price":-12.50,"note":"caf\u00e9 \"quoted\" \\ back"}`,
	} {
		if !plainJSON([]byte(body)) {
			t.Errorf("%s is walked token by token", body)
		}
	}
}
