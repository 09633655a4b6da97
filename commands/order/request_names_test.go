package order

import (
	"strings"
	"testing"
)

// TestMemberNamesMatchTheirFieldsExactly: a member whose name differs from
// a field's only by case is an unknown field at every depth, as it is at
// the top, never a second value for the field.
func TestMemberNamesMatchTheirFieldsExactly(t *testing.T) {
	const sides = `"sides":{"front_side":"https://img.example/a.png"}`
	replace := func(old, new string) []byte {
		if !strings.Contains(base, old) {
			t.Fatalf("base has no %s", old)
		}
		return []byte(strings.Replace(base, old, new, 1))
	}
	tests := []struct {
		name    string
		body    []byte
		field   string
		message string
	}{
		{"a top-level Reference_ID is an unknown field",
			replace(`"reference_id"`, `"Reference_ID"`), "Reference_ID", "unknown field Reference_ID"},
		{"a customer EMAIL beside email is an unknown field",
			replace(`"email": "ann@example.com"`, `"email": "ann@example.com", "EMAIL": "x@evil.example"`), "customer.EMAIL", "unknown field customer.EMAIL"},
		{"a customer Email alone is an unknown field",
			replace(`"email"`, `"Email"`), "customer.Email", "unknown field customer.Email"},
		{"a shipping_address CITY is an unknown field",
			replace(`"city"`, `"CITY"`), "shipping_address.CITY", "unknown field shipping_address.CITY"},
		{"a line VARIANT_ID beside variant_id is an unknown field",
			replace(`"variant_id": "10000000-0000-0000-0000-000000000001"`, `"variant_id": "10000000-0000-0000-0000-000000000001", "VARIANT_ID": "10000000-0000-0000-0000-000000000002"`),
			"line_items[0].VARIANT_ID", "unknown field line_items[0].VARIANT_ID"},
		{"a line Quantity is an unknown field",
			[]byte(`{"customer":{},"line_items":[{"variant_id":"10000000-0000-0000-0000-000000000001","Quantity":2,` + sides + `}]}`),
			"line_items[0].Quantity", "unknown field line_items[0].Quantity"},
		{"a line Yarn_Type is an unknown field",
			[]byte(`{"line_items":[{"variant_id":"10000000-0000-0000-0000-000000000001","quantity":2,"Yarn_Type":"yarn_20mm",` + sides + `}]}`),
			"line_items[0].Yarn_Type", "unknown field line_items[0].Yarn_Type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeCreate(tt.body)
			fe, ok := err.(*FieldError)
			if !ok {
				t.Fatalf("error %v (%T), want a FieldError", err, err)
			}
			if fe.Field != tt.field || fe.Message != tt.message {
				t.Fatalf("got field %q message %q\nwant field %q message %q", fe.Field, fe.Message, tt.field, tt.message)
			}
		})
	}
	t.Run("names in their own case still decode", func(t *testing.T) {
		r, err := DecodeCreate([]byte(base))
		if err != nil {
			t.Fatal(err)
		}
		if r.Customer.Email != "ann@example.com" || r.ShippingAddress.City != "Austin" || r.LineItems[0].Quantity != 2 {
			t.Fatalf("decoded %+v", r)
		}
	})
}

// BenchmarkDecodeCreate times both readings of a well-formed body: the
// fast path every such body takes, and the field-by-field reading a body
// the fast path refuses gets.
func BenchmarkDecodeCreate(b *testing.B) {
	body := []byte(base)
	b.Run("fast path", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeCreate(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("field by field", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeCreateByField(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
