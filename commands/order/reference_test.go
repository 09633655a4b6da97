package order

import (
	"strings"
	"testing"
)

// TestReferenceIDEnds: a control character at either end of reference_id
// is refused like one inside it, never trimmed away; surrounding spaces
// are trimmed as before.
func TestReferenceIDEnds(t *testing.T) {
	const refused = "reference_id must not contain control or format characters (such as bidi overrides or zero-width spaces)"
	tests := []struct {
		name    string
		ref     string
		stored  string // when accepted
		message string // when refused
	}{
		{"a trailing line feed is refused", "R-1\n", "", refused},
		{"a leading tab is refused", "\tR-1", "", refused},
		{"a trailing carriage return is refused", "R-1\r", "", refused},
		{"a leading vertical tab is refused", "\vR-1", "", refused},
		{"a trailing form feed is refused", "R-1\f", "", refused},
		{"a trailing next-line (U+0085) is refused", "R-1\u0085", "", refused},
		{"a leading zero-width no-break space (U+FEFF) is refused", "\ufeffR-1", "", refused},
		{"a control character behind a space is refused", "R-1 \n ", "", refused},
		{"surrounding spaces are trimmed", "  R-1  ", "R-1", ""},
		{"a surrounding no-break space is trimmed", "\u00a0R-1\u00a0", "R-1", ""},
		{"a space inside is kept", "R 1", "R 1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := validate(t, with(t, map[string]any{"reference_id": tt.ref}))
			if tt.message == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if d.ReferenceID != tt.stored {
					t.Fatalf("stored %q, want %q", d.ReferenceID, tt.stored)
				}
				return
			}
			fe, ok := err.(*FieldError)
			if !ok {
				t.Fatalf("error %v (%T), want a FieldError; stored %q", err, err, d.ReferenceID)
			}
			if fe.Field != "reference_id" || fe.Message != tt.message {
				t.Fatalf("got field %q message %q\nwant field reference_id message %q", fe.Field, fe.Message, tt.message)
			}
		})
	}
}

// TestReferenceIDLengthCountsCharacters: the limit of 100 is in characters
// (Unicode code points, as the OpenAPI maxLength counts them) of the
// reference as stored (trimmed, NFC), not in bytes.
func TestReferenceIDLengthCountsCharacters(t *testing.T) {
	const tooLong = "reference_id must be at most 100 characters"
	tests := []struct {
		name    string
		ref     string
		message string // "" when accepted
	}{
		{"40 CJK characters (120 bytes) are accepted", strings.Repeat("注", 40), ""},
		{"100 CJK characters are accepted", strings.Repeat("注", 100), ""},
		{"100 emoji (400 bytes) are accepted", strings.Repeat("😀", 100), ""},
		{"100 ASCII characters are accepted", strings.Repeat("r", 100), ""},
		{"100 characters inside surrounding spaces are accepted", "  " + strings.Repeat("r", 100) + "  ", ""},
		{"100 characters sent decomposed (NFD) are accepted", strings.Repeat("e\u0301", 100), ""},
		{"101 CJK characters are refused", strings.Repeat("注", 101), tooLong},
		{"101 ASCII characters are refused", strings.Repeat("r", 101), tooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := validate(t, with(t, map[string]any{"reference_id": tt.ref}))
			if tt.message == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			fe, ok := err.(*FieldError)
			if !ok {
				t.Fatalf("error %v (%T), want a FieldError", err, err)
			}
			if fe.Field != "reference_id" || fe.Message != tt.message {
				t.Fatalf("got field %q message %q\nwant field reference_id message %q", fe.Field, fe.Message, tt.message)
			}
		})
	}
}
