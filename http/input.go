package http

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	json "github.com/go-json-experiment/json/v1"
	"github.com/gofiber/fiber/v2"
	"github.com/printpod/pod/schemas"
)

// The input gate: every request passes it before a handler runs, so no
// handler, decider or read model ever sees text Postgres or a client could
// choke on. Two steps share it:
//   - checkFraming, on every request before authentication: one
//     Authorization header at most, no conflicting Content-Length, no
//     Content-Length beside Transfer-Encoding, a well-formed
//     Idempotency-Key;
//   - checkInput, on /v1 after authentication: query values, and the body
//     (decoded from gzip within the body limit, then walked once as JSON).
//
// Text rules: every string (JSON keys and values, query names and values)
// is valid UTF-8 without U+0000; a JSON object has each key once; JSON
// nests at most MaxJSONDepth deep; every number fits a float64. A breach is
// 400 VALIDATION_ERROR naming the field by its JSON path.

// MaxJSONDepth is the deepest nesting of objects and arrays accepted.
const MaxJSONDepth = 32

// MaxIdempotencyKey is the longest Idempotency-Key accepted.
const MaxIdempotencyKey = 255

// checkFraming refuses requests whose headers can be read two ways.
func checkFraming(c *fiber.Ctx) error {
	var auths, lengths, encodings, contentEncodings int
	var length []byte
	conflict := false
	for line := range bytes.SplitSeq(c.Request().Header.RawHeaders(), []byte("\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch name = bytes.TrimSpace(name); {
		case bytes.EqualFold(name, []byte("authorization")):
			auths++
		case bytes.EqualFold(name, []byte("content-length")):
			lengths++
			if lengths > 1 && !bytes.Equal(value, length) {
				conflict = true
			}
			length = value
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			encodings++
		case bytes.EqualFold(name, []byte("content-encoding")):
			contentEncodings++
		}
	}
	switch {
	case auths > 1:
		return Validation("Authorization", "send one Authorization header, not several")
	case conflict:
		return Validation("Content-Length", "Content-Length headers disagree")
	case lengths > 0 && encodings > 0:
		return Validation("Content-Length", "send Content-Length or Transfer-Encoding, not both")
	case contentEncodings > 1:
		// The body is checked as the first one says, and Fiber's c.Body()
		// would decode it as the last one says.
		return Validation("Content-Encoding", "send one Content-Encoding header, not several")
	}
	if err := checkIdempotencyKey(c); err != nil {
		return err
	}
	return c.Next()
}

// checkIdempotencyKey holds a present Idempotency-Key to its rules: 1..255
// printable ASCII characters, no leading or trailing space. A key that
// breaks them is refused, never ignored: ignoring it would let a request the
// client meant to be safe to repeat run twice.
func checkIdempotencyKey(c *fiber.Ctx) error {
	keys := c.Request().Header.PeekAll("Idempotency-Key")
	if len(keys) == 0 {
		return nil
	}
	const rule = "Idempotency-Key must be 1 to 255 printable ASCII characters with no leading or trailing space"
	if len(keys) > 1 {
		return Validation("Idempotency-Key", "send one Idempotency-Key header, not several")
	}
	k := keys[0]
	if len(k) == 0 || len(k) > MaxIdempotencyKey || k[0] == ' ' || k[len(k)-1] == ' ' {
		return Validation("Idempotency-Key", rule)
	}
	for _, b := range k {
		if b < ' ' || b > '~' {
			return Validation("Idempotency-Key", rule)
		}
	}
	return nil
}

// checkInput decodes and checks the query and body of an API request. A
// query parameter given twice (?status=FAILED&status=CANCELLED) is
// refused: no endpoint takes a list that way, and reading the first alone
// would answer a question the client did not ask.
func checkInput(c *fiber.Ctx) error {
	args := c.Request().URI().QueryArgs()
	var seen map[string]bool
	if args.Len() > 1 {
		seen = make(map[string]bool, args.Len())
	}
	for k, v := range args.All() {
		name := string(k)
		if !validText(k) {
			return Validation("query", "query parameter names must be valid UTF-8 without U+0000")
		}
		if seen[name] {
			return Validation(name, name+" must be given once")
		}
		if seen != nil {
			seen[name] = true
		}
		if bad := textError(name, v); bad != nil {
			return bad
		}
	}
	if err := decodeBody(c); err != nil {
		return err
	}
	if body := c.Request().Body(); len(bytes.TrimSpace(body)) > 0 {
		check := CheckJSON
		if c.Method() == fiber.MethodPost && c.Path() == batchesPath {
			check = checkBatchEnvelope
		}
		if err := check(body); err != nil {
			return err
		}
	}
	return c.Next()
}

// checkBatchEnvelope holds a batch body to the text rules but for its
// orders: each is checked as a single create's body is when the batch
// works it (Orders.BatchItem), so one order that breaks them fails alone,
// with the answer its single create would get, and the others go on. The
// envelope is checked with each order in it read as {}.
func checkBatchEnvelope(body []byte) *Error {
	if CheckJSON(body) == nil {
		return nil
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	var skeleton []byte
	skip := func() error {
		if _, err := dec.ReadToken(); err != nil { // [
			return err
		}
		skeleton = append(skeleton, '[')
		for n := 0; dec.PeekKind() != ']'; n++ {
			if _, err := dec.ReadValue(); err != nil {
				return err
			}
			if n > 0 {
				skeleton = append(skeleton, ',')
			}
			skeleton = append(skeleton, "{}"...)
		}
		_, err := dec.ReadToken()
		skeleton = append(skeleton, ']')
		return err
	}
	err := func() error {
		if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
			return errors.New("not an object")
		}
		skeleton = append(skeleton, '{')
		for n := 0; dec.PeekKind() != '}'; n++ {
			name, err := dec.ReadValue()
			if err != nil {
				return err
			}
			if n > 0 {
				skeleton = append(skeleton, ',')
			}
			skeleton = append(append(skeleton, name...), ':')
			if string(name) == `"orders"` && dec.PeekKind() == '[' {
				err = skip()
			} else {
				var v jsontext.Value
				v, err = dec.ReadValue()
				skeleton = append(skeleton, v...)
			}
			if err != nil {
				return err
			}
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		skeleton = append(skeleton, '}')
		if _, err := dec.ReadToken(); err != io.EOF {
			return errors.New("more after the object")
		}
		return nil
	}()
	if err != nil {
		return CheckJSON(body) // not JSON: said as for any body
	}
	return CheckJSON(skeleton)
}

// decodeBody replaces a gzip body by its decoded bytes, reading at most
// BodyLimit of them: a small body that inflates past the limit is refused
// as soon as it does, never held whole.
func decodeBody(c *fiber.Ctx) error {
	enc := strings.ToLower(strings.TrimSpace(c.Get(fiber.HeaderContentEncoding)))
	switch enc {
	case "", "identity":
		// Fiber's c.Body() decodes what the header names: without it,
		// handlers read the very bytes checked.
		c.Request().Header.Del(fiber.HeaderContentEncoding)
		return nil
	case "gzip", "x-gzip":
	default:
		return Validation("Content-Encoding", "Content-Encoding must be gzip or identity")
	}
	zr, err := gzip.NewReader(bytes.NewReader(c.Request().Body()))
	if err != nil {
		return Validation("Content-Encoding", "the body is not valid gzip")
	}
	decoded, err := io.ReadAll(io.LimitReader(zr, BodyLimit+1))
	if err != nil {
		return Validation("Content-Encoding", "the body is not valid gzip")
	}
	if len(decoded) > BodyLimit {
		return tooLarge()
	}
	c.Request().SetBodyRaw(decoded)
	c.Request().Header.Del(fiber.HeaderContentEncoding)
	return nil
}

func tooLarge() *Error {
	return &Error{Code: schemas.CodePayloadTooLarge,
		Message: "request body is larger than 1 MiB"}
}

// validText reports whether b is valid UTF-8 without U+0000.
func validText(b []byte) bool {
	return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0
}

// textError is the error for field's text b, or nil when b is valid.
func textError(field string, b []byte) *Error {
	switch {
	case !utf8.Valid(b):
		return Validation(field, field+" must be valid UTF-8")
	case bytes.IndexByte(b, 0) >= 0:
		return Validation(field, field+" must not contain the NUL character (U+0000)")
	}
	return nil
}

// CheckJSON returns the first breach of the text rules in a JSON body as a
// 400 naming the field, or nil. A body plainJSON vouches for passes at
// once; any other is walked token by token to find and name the breach.
func CheckJSON(body []byte) *Error {
	if plainJSON(body) {
		return nil
	}
	return walkJSON(body)
}

// plainJSON reports whether body keeps the text rules for reasons one scan
// can see: it is one valid JSON value in valid UTF-8, with no key twice in
// an object (jsontext's validation), no escaped U+0000, nesting at most
// MaxJSONDepth deep, and only numbers of at most 20 characters without an
// exponent (each fits a float64). False only means the walk must decide;
// FuzzPlainJSONPassesTheWalk checks that the walk passes every body
// plainJSON does. It is several times faster than the walk, which
// allocates a token at a time.
func plainJSON(body []byte) bool {
	depth, inString, escaped := 0, false, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch {
			case escaped:
				escaped = false
				if c == 'u' && bytes.HasPrefix(body[i+1:], []byte("0000")) {
					return false
				}
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch {
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > MaxJSONDepth {
				return false
			}
		case c == '}' || c == ']':
			depth--
		case c == '-' || (c >= '0' && c <= '9'):
			end := i
			for end < len(body) && strings.IndexByte("+-.0123456789", body[end]) >= 0 {
				end++
			}
			if end-i > 20 || (end < len(body) && (body[end] == 'e' || body[end] == 'E')) {
				return false
			}
			i = end - 1
		}
	}
	return jsontext.Value(body).IsValid()
}

// walkJSON walks a JSON body a token at a time and returns the first
// breach of the text rules, named by its JSON path, or nil.
func walkJSON(body []byte) *Error {
	badByte := -1
	if !utf8.Valid(body) {
		badByte = firstInvalidUTF8(body)
	}
	// An escaped UTF-16 surrogate with no partner ("\ud800") names no
	// character either; Go's decoder would turn it into U+FFFD too.
	if at := firstLoneSurrogate(body); at >= 0 && (badByte < 0 || at < badByte) {
		badByte = at
	}
	w := jsonWalk{dec: json.NewDecoder(bytes.NewReader(body))}
	w.dec.UseNumber()
	for {
		tok, err := w.dec.Token()
		if errors.Is(err, io.EOF) {
			if !w.done {
				return notJSON()
			}
			return nil
		}
		if badByte >= 0 && w.dec.InputOffset() > int64(badByte) {
			// Go's decoder would turn the bad bytes into U+FFFD; name the
			// field they sit in instead.
			field := w.path()
			if s, ok := tok.(string); ok && w.expectingKey() {
				field = w.join(s)
			}
			return Validation(field, orBody(field)+" must be valid UTF-8")
		}
		if err != nil || w.done {
			return notJSON()
		}
		if e := w.step(tok); e != nil {
			return e
		}
	}
}

// notJSON is the answer for a body that is not one JSON value: every body
// the API takes is an object.
func notJSON() *Error {
	return Validation("", "request body must be a JSON object")
}

func orBody(field string) string {
	if field == "" {
		return "request body"
	}
	return field
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// firstLoneSurrogate returns the offset of the first \u escape of a UTF-16
// surrogate that is not half of a pair (a high one followed by an escaped
// low one), or -1. In JSON a backslash appears only inside strings, and
// each escape is read whole, so "\\u..." is an escaped backslash.
func firstLoneSurrogate(b []byte) int {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return -1
		}
		i += j
		r, ok := hex4(i)
		if !ok {
			i++ // a one-character escape
			continue
		}
		switch {
		case r >= 0xd800 && r < 0xdc00:
			if low, ok := hex4(i + 6); ok && low >= 0xdc00 && low < 0xe000 {
				i += 11
				continue
			}
			return i
		case r >= 0xdc00 && r < 0xe000:
			return i
		}
		i += 5
	}
	return -1
}

// frame is one open object or array of a jsonWalk.
type frame struct {
	object  bool
	keys    map[string]struct{}
	key     string // object: the current key
	haveKey bool   // object: a key was read, its value is next
	index   int    // array: the current element
}

type jsonWalk struct {
	dec   *json.Decoder
	stack []*frame
	done  bool // the top-level value is complete
}

func (w *jsonWalk) top() *frame {
	if len(w.stack) == 0 {
		return nil
	}
	return w.stack[len(w.stack)-1]
}

func (w *jsonWalk) expectingKey() bool {
	f := w.top()
	return f != nil && f.object && !f.haveKey
}

// path is the JSON path of the value being read: line_items[2].note.
func (w *jsonWalk) path() string {
	var b strings.Builder
	for _, f := range w.stack {
		switch {
		case f.object && f.haveKey:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.key)
		case !f.object:
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
		}
	}
	return b.String()
}

// join is the path of key inside the innermost object.
func (w *jsonWalk) join(key string) string {
	if p := w.path(); p != "" {
		return p + "." + key
	}
	return key
}

// valueDone moves past a complete value.
func (w *jsonWalk) valueDone() {
	f := w.top()
	switch {
	case f == nil:
		w.done = true
	case f.object:
		f.haveKey = false
	default:
		f.index++
	}
}

func (w *jsonWalk) step(tok json.Token) *Error {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{', '[':
			if len(w.stack) >= MaxJSONDepth {
				return Validation(w.path(), fmt.Sprintf("request body nests deeper than %d levels", MaxJSONDepth))
			}
			f := &frame{object: t == '{'}
			if f.object {
				f.keys = map[string]struct{}{}
			}
			w.stack = append(w.stack, f)
		default:
			w.stack = w.stack[:len(w.stack)-1]
			w.valueDone()
		}
	case string:
		if w.expectingKey() {
			field := w.join(t)
			if e := textError(field, []byte(t)); e != nil {
				return e
			}
			f := w.top()
			if _, dup := f.keys[t]; dup {
				return Validation(field, field+" appears twice in one object")
			}
			f.keys[t] = struct{}{}
			f.key, f.haveKey = t, true
			return nil
		}
		if e := textError(orBody(w.path()), []byte(t)); e != nil {
			return e
		}
		w.valueDone()
	case json.Number:
		if _, err := strconv.ParseFloat(string(t), 64); err != nil {
			field := w.path()
			return Validation(field, orBody(field)+" is a number out of range")
		}
		w.valueDone()
	default: // bool, nil
		w.valueDone()
	}
	return nil
}
