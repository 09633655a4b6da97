package order

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/internal/uuidtext"
)

// CreateRequest is the create-order body, decoded but not yet validated.
type CreateRequest struct {
	ReferenceID     string        `json:"reference_id"`
	Customer        *Customer     `json:"customer"`
	ShippingAddress *Address      `json:"shipping_address"`
	LabelLink       string        `json:"label_link"`
	TrackingNumber  string        `json:"tracking_number"`
	ShippingService string        `json:"shipping_service"`
	LineItems       []LineRequest `json:"line_items"`
	Note            string        `json:"note"`
	Tags            string        `json:"tags"`
	Force           bool          `json:"force"`
	AddonService    []string      `json:"addon_service"`
}

// Customer of an order.
type Customer struct {
	Email     string `json:"email"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Phone     string `json:"phone,omitempty"`
}

// Address is a shipping address.
type Address struct {
	Address1    string `json:"address1"`
	Address2    string `json:"address2,omitempty"`
	City        string `json:"city"`
	Province    string `json:"province"`
	CountryCode string `json:"country_code"`
	Zip         string `json:"zip"`
}

// LineSpec is what a client says of one line; a validated Line keeps it.
type LineSpec struct {
	VariantID         uuid.UUID         `json:"variant_id"`
	Quantity          int               `json:"quantity"`
	Sides             map[string]string `json:"sides"`
	PrintingTechnique string            `json:"printing_technique,omitempty"`
	EmbFile           string            `json:"emb_file,omitempty"`
	DesignEmbType     string            `json:"design_emb_type,omitempty"`
	NumberOfPets      *int              `json:"number_of_pets,omitempty"`
	YarnType          string            `json:"yarn_type,omitempty"`
	AddonService      string            `json:"addon_service,omitempty"`
}

// LineRequest is one line of the create-order body.
type LineRequest struct {
	LineSpec
	hasVariant bool
}

// FieldError is a problem with one field, named by its JSON path
// (line_items[2].yarn_type).
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *FieldError) Error() string { return e.Message }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// DecodeCreate decodes a create-order body. Wrong JSON, wrong types and
// unknown fields are reported as a FieldError naming the path.
//
// A body is first read in one pass under strict rules (decodeCreateFast);
// only one that pass refuses is read again field by field, to name what is
// wrong. The strict pass accepts no body the field-by-field reading refuses
// and decodes every body it accepts the same way (FuzzCreateDecodersAgree):
// it is the field-by-field reading's fast path for well-formed bodies, which
// it decodes in about a sixth of the time.
func DecodeCreate(body []byte) (CreateRequest, error) {
	if r, ok := decodeCreateFast(body); ok {
		return r, nil
	}
	return decodeCreateByField(body)
}

// createWire and lineWire are the create body as the strict pass reads it:
// the request's own fields, but for those that take more than one form
// (variant_id, addon_service), which stay raw and are read as
// decodeCreateByField reads them. A field of the outer struct hides the
// embedded one of the same name.
type createWire struct {
	CreateRequest
	LineItems    []*lineWire    `json:"line_items"`
	AddonService jsontext.Value `json:"addon_service"`
}

type lineWire struct {
	LineSpec
	VariantID jsontext.Value `json:"variant_id"`
}

// decodeCreateFast reads body in one pass: an object whose member names
// match exactly, with no unknown or repeated member, valid UTF-8, every
// value of its field's type, and no line that is null. ok is false for
// anything else, and for a variant_id or addon_service that
// decodeCreateByField would refuse.
func decodeCreateFast(body []byte) (r CreateRequest, ok bool) {
	body = bytes.TrimLeft(body, " \t\r\n")
	if len(body) == 0 || body[0] != '{' {
		return CreateRequest{}, false
	}
	var w createWire
	if jsonv2.Unmarshal(body, &w, jsonv2.RejectUnknownMembers(true)) != nil {
		return CreateRequest{}, false
	}
	r = w.CreateRequest
	if w.AddonService != nil {
		addons, err := decodeOrderAddons(json.RawMessage(w.AddonService))
		if err != nil {
			return CreateRequest{}, false
		}
		r.AddonService = addons
	}
	for _, l := range w.LineItems {
		if l == nil {
			return CreateRequest{}, false
		}
		line := LineRequest{LineSpec: l.LineSpec}
		var valid bool
		if line.VariantID, line.hasVariant, valid = variantOf(l.VariantID); !valid {
			return CreateRequest{}, false
		}
		r.LineItems = append(r.LineItems, line)
	}
	return r, true
}

// decodeCreateByField decodes a create-order body a field at a time, so
// that a refusal names the field.
func decodeCreateByField(body []byte) (CreateRequest, error) {
	var top map[string]json.RawMessage
	if err := strictDecode(body, &top); err != nil || top == nil {
		return CreateRequest{}, fieldErr("", "request body must be a JSON object")
	}
	var r CreateRequest
	known := map[string]any{
		"reference_id": &r.ReferenceID, "customer": &r.Customer, "shipping_address": &r.ShippingAddress,
		"label_link": &r.LabelLink, "tracking_number": &r.TrackingNumber, "shipping_service": &r.ShippingService,
		"note": &r.Note, "tags": &r.Tags, "force": &r.Force,
	}
	// In the order of their names, so the same body always gets the same
	// answer whichever of its fields are wrong.
	for _, name := range slices.Sorted(maps.Keys(top)) {
		raw := top[name]
		switch name {
		case "line_items":
			var items []json.RawMessage
			if err := json.Unmarshal(raw, &items); err != nil {
				return CreateRequest{}, fieldErr("line_items", "line_items must be an array of line items")
			}
			for i, item := range items {
				line, err := decodeLine(item, fmt.Sprintf("line_items[%d]", i))
				if err != nil {
					return CreateRequest{}, err
				}
				r.LineItems = append(r.LineItems, line)
			}
		case "addon_service":
			addons, err := decodeOrderAddons(raw)
			if err != nil {
				return CreateRequest{}, err
			}
			r.AddonService = addons
		default:
			dst, ok := known[name]
			if !ok {
				return CreateRequest{}, fieldErr(name, "unknown field %s", name)
			}
			if err := strictDecode(raw, dst); err != nil {
				return CreateRequest{}, typeError(name, err)
			}
		}
	}
	return r, nil
}

func decodeLine(raw json.RawMessage, path string) (LineRequest, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return LineRequest{}, fieldErr(path, "%s must be an object", path)
	}
	var l LineRequest
	if v, ok := fields["variant_id"]; ok && string(v) != "null" {
		var valid bool
		if l.VariantID, l.hasVariant, valid = variantOf(v); !valid {
			return LineRequest{}, fieldErr(path+".variant_id", "%s.variant_id must be a UUID string", path)
		}
		delete(fields, "variant_id")
	}
	rest, _ := json.Marshal(fields)
	if err := strictDecode(rest, &l.LineSpec); err != nil {
		return LineRequest{}, typeError(path, err)
	}
	return l, nil
}

// variantOf reads a line's raw variant_id: absent (nil) or null names no
// variant; anything else must be a UUID string in its canonical form
// (uuidtext.Parse), else valid is false.
func variantOf(raw []byte) (id uuid.UUID, has, valid bool) {
	if raw == nil || string(raw) == "null" {
		return uuid.Nil, false, true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return uuid.Nil, false, false
	}
	id, err := uuidtext.Parse(s)
	return id, err == nil, err == nil
}

// decodeOrderAddons accepts the current array form and the older single
// string or null, normalised to an array.
func decodeOrderAddons(raw json.RawMessage) ([]string, error) {
	trimmed := bytes.TrimSpace(raw)
	if string(trimmed) == "null" {
		return []string{}, nil
	}
	var one string
	if json.Unmarshal(trimmed, &one) == nil {
		if one == "" {
			return []string{}, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(trimmed, &many); err != nil {
		return nil, fieldErr("addon_service", "addon_service must be an array of strings")
	}
	return many, nil
}

// StrictOptions are the v1 decoding rules (errors as encoding/json reports
// them, which typeError reads) with two exceptions: a member no field
// names is an error, and a member name matches its field only exactly. v1
// matches names regardless of case, which would read "EMAIL" as a second
// email beside "email", the last one winning; under these options it is an
// unknown field at every depth, as "Reference_ID" is at the top.
var StrictOptions = jsonv2.JoinOptions(json.DefaultOptionsV1(),
	jsonv2.RejectUnknownMembers(true), jsonv2.MatchCaseInsensitiveNames(false))

// strictDecode decodes b, one JSON value and nothing after it, into v
// under StrictOptions.
func strictDecode(b []byte, v any) error {
	return jsonv2.Unmarshal(b, v, StrictOptions)
}

// typeError turns a json error into a FieldError with the full path.
func typeError(prefix string, err error) *FieldError {
	join := func(a, b string) string {
		switch {
		case a == "":
			return b
		case b == "":
			return a
		}
		return a + "." + b
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// A member of a map (sides) is named by its key, escaped as in a
		// JSON pointer.
		field := strings.NewReplacer("~1", "/", "~0", "~").Replace(te.Field)
		f := join(prefix, field)
		return fieldErr(f, "%s must be %s", f, jsonKind(te.Type.Kind().String()))
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "json: unknown field ") {
		name := strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
		f := join(prefix, name)
		return fieldErr(f, "unknown field %s", f)
	}
	return fieldErr(prefix, "%s is malformed: %s", orBody(prefix), msg)
}

func orBody(p string) string {
	if p == "" {
		return "request body"
	}
	return p
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "int", "int64", "int32":
		return "a whole number"
	case "bool":
		return "true or false"
	case "map", "struct", "ptr":
		return "an object"
	case "slice":
		return "an array"
	}
	return "of another type"
}
