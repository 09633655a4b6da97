package uuidtext

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestParse(t *testing.T) {
	const id = "6f3d1c52-5b0e-4d8e-9a55-0c1f4f2b7e10"
	tests := []struct {
		name string
		text string
		ok   bool
	}{
		{"the canonical form is a UUID", id, true},
		{"the canonical form in capitals is a UUID", strings.ToUpper(id), true},
		{"the nil UUID is a UUID", "00000000-0000-0000-0000-000000000000", true},
		{"a URN is not", "urn:uuid:" + id, false},
		{"a braced form is not", "{" + id + "}", false},
		{"32 bare hex digits are not", strings.ReplaceAll(id, "-", ""), false},
		{"hyphens out of place are not", "6f3d1c525-b0e-4d8e-9a55-0c1f4f2b7e10", false},
		{"a non-hex digit is not", "6f3d1c52-5b0e-4d8e-9a55-0c1f4f2b7e1g", false},
		{"surrounding spaces are not", " " + id + " ", false},
		{"the empty string is not", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.text)
			if tt.ok != (err == nil) {
				t.Fatalf("Parse(%q) = %v, %v", tt.text, got, err)
			}
			if tt.ok && got != uuid.MustParse(tt.text) {
				t.Fatalf("Parse(%q) = %v, want %v", tt.text, got, uuid.MustParse(tt.text))
			}
		})
	}
}
