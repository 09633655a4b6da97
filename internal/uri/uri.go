package uri

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is why a string is not a URI: the first character a URI may not
// hold. Reason reads after the name of the field ("url contains a space
// at position 20, ...").
type Error struct {
	Pos    int // 1-based position (in characters) of the offending character
	Reason string
}

func (e *Error) Error() string { return e.Reason }

// Valid checks that s holds only what RFC 3986 lets a URI hold:
// unreserved characters (ALPHA DIGIT - . _ ~), reserved ones (: / ? # [ ]
// @ ! $ & ' ( ) * + , ; =) and %XX escapes (two hex digits). A space, < > "
// { } | \ ^ `, a control character, any non-ASCII character or a % not
// followed by two hex digits is refused with a *Error naming the first
// one and how to escape it. Only the characters are checked: callers parse
// the URI for its structure (scheme, host) themselves.
//
// Webhook URLs (Guard.CheckURL), order image URLs and label links share
// this rule.
func Valid(s string) error {
	pos := 0
	for i := 0; i < len(s); {
		pos++
		c := s[i]
		switch {
		case uriChar(c):
			i++
		case c == '%':
			if i+2 >= len(s) || !hexByte(s[i+1:i+3]) {
				return &Error{Pos: pos, Reason: fmt.Sprintf(
					"contains '%%' at position %d not followed by two hex digits; a URI writes a literal '%%' as %%25", pos)}
			}
			i += 3
			pos += 2
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			var name string
			switch {
			case r == utf8.RuneError && n <= 1:
				name = fmt.Sprintf("the byte 0x%02X (not UTF-8)", c)
			case c == ' ':
				name = "a space"
			case r < 0x20 || r == 0x7f:
				name = fmt.Sprintf("the control character U+%04X", r)
			case r < utf8.RuneSelf:
				name = fmt.Sprintf("'%c'", r)
			default:
				name = fmt.Sprintf("'%c' (U+%04X)", r, r)
			}
			return &Error{Pos: pos, Reason: fmt.Sprintf(
				"contains %s at position %d, which a URI may not hold unescaped; percent-encode it as %s", name, pos, percentEncode(s[i:i+n]))}
		}
	}
	return nil
}

// uriChar reports whether c is an unreserved or reserved URI character.
func uriChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-._~:/?#[]@!$&'()*+,;=", c) >= 0
}

func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// hexByte reports whether two characters are hex digits.
func hexByte(s string) bool {
	_, err := strconv.ParseUint(s, 16, 8)
	return err == nil
}
