package uri

import (
	"errors"
	"testing"
)

func TestValidURI(t *testing.T) {
	cases := []struct {
		s    string
		pos  int // 0: valid
		want string
	}{
		{"", 0, ""},
		{"https://example.com/a%20b?x=%3C%3e&y=%25#top", 0, ""},
		{"https://[2001:db8::1]:8443/a!$&'()*+,;=:@b?c=/?[]", 0, ""},
		{"https://example.com/A-Z_a.z~09", 0, ""},
		{"https://cdn.example.com/img.png?w=100%", 38, "contains '%' at position 38 not followed by two hex digits; a URI writes a literal '%' as %25"},
		{"%4", 1, "contains '%' at position 1 not followed by two hex digits; a URI writes a literal '%' as %25"},
		{"%%41", 1, "contains '%' at position 1 not followed by two hex digits; a URI writes a literal '%' as %25"},
		{"a b", 2, "contains a space at position 2, which a URI may not hold unescaped; percent-encode it as %20"},
		{"%41<", 4, "contains '<' at position 4, which a URI may not hold unescaped; percent-encode it as %3C"},
		{"%C3%A9>", 7, "contains '>' at position 7, which a URI may not hold unescaped; percent-encode it as %3E"},
		{"x\x00", 2, "contains the control character U+0000 at position 2, which a URI may not hold unescaped; percent-encode it as %00"},
		{"x\n", 2, "contains the control character U+000A at position 2, which a URI may not hold unescaped; percent-encode it as %0A"},
		{"https://example.com/€", 21, "contains '€' (U+20AC) at position 21, which a URI may not hold unescaped; percent-encode it as %E2%82%AC"},
		{"https://example.com/\u00a0", 21, "contains '\u00a0' (U+00A0) at position 21, which a URI may not hold unescaped; percent-encode it as %C2%A0"},
		{"a\xc3", 2, "contains the byte 0xC3 (not UTF-8) at position 2, which a URI may not hold unescaped; percent-encode it as %C3"},
	}
	for _, c := range cases {
		err := Valid(c.s)
		if c.pos == 0 {
			if err != nil {
				t.Errorf("Valid(%q) = %v, want nil", c.s, err)
			}
			continue
		}
		var ue *Error
		if !errors.As(err, &ue) {
			t.Errorf("Valid(%q) = %v, want a *Error", c.s, err)
			continue
		}
		if ue.Pos != c.pos || ue.Error() != c.want {
			t.Errorf("Valid(%q) = %d %q, want %d %q", c.s, ue.Pos, ue.Error(), c.pos, c.want)
		}
	}
	// Every byte alone: exactly the unreserved and reserved characters pass.
	for b := 0; b < 256; b++ {
		s := string([]byte{byte(b)})
		ok := (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9')
		for _, c := range []byte("-._~:/?#[]@!$&'()*+,;=") {
			ok = ok || byte(b) == c
		}
		if got := Valid(s) == nil; got != ok {
			t.Errorf("Valid(%q) valid = %v, want %v", s, got, ok)
		}
	}
}
