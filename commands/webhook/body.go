package webhook

import (
	"fmt"
	"slices"
	"strings"

	json "github.com/go-json-experiment/json/v1"
	"github.com/printpod/pod/schemas"
)

// Body is a decoded create or patch body.
type Body struct {
	URL            *string
	Topics         []string
	Description    *string
	SetDescription bool // the body names description (null clears it)
	IsActive       *bool
}

// MaxDescription is the longest webhook description accepted.
const MaxDescription = 500

// BodyError refuses a body: its error code (VALIDATION_ERROR, or
// INVALID_WEBHOOK_URL for a url the guard refuses), the field (a JSON
// name; "" for the whole body) and why.
type BodyError struct {
	Code, Field, Message string
}

func (e *BodyError) Error() string { return e.Message }

func invalid(field, message string) *BodyError {
	return &BodyError{Code: schemas.CodeValidation, Field: field, Message: message}
}

// webhookFields are the fields of a webhook body; only description may be
// null (it clears the description).
var webhookFields = []string{"url", "topics", "description", "is_active"}

// DecodeBody reads a create (every field allowed, url and topics
// required) or patch (at least one field) body, naming the field of the
// first problem. checkURL is the SSRF guard's check of a url.
func DecodeBody(raw []byte, patch bool, checkURL func(string) error) (Body, error) {
	var b Body
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return b, invalid("", "request body must be a JSON object")
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := fields[k]
		if string(v) == "null" && k != "description" && slices.Contains(webhookFields, k) {
			return b, invalid(k, k+" cannot be null")
		}
		switch k {
		case "url":
			var s string
			if json.Unmarshal(v, &s) != nil {
				return b, invalid("url", "url must be a string")
			}
			if err := checkURL(s); err != nil {
				return b, &BodyError{Code: schemas.CodeInvalidWebhookURL, Field: "url", Message: err.Error()}
			}
			b.URL = &s
		case "topics":
			var items []json.RawMessage
			if json.Unmarshal(v, &items) != nil || items == nil {
				return b, invalid("topics", "topics must be an array of topic names")
			}
			if len(items) == 0 {
				return b, invalid("topics", "topics must name at least 1 topic")
			}
			b.Topics = []string{}
			for i, it := range items {
				field := fmt.Sprintf("topics[%d]", i)
				var t string
				if json.Unmarshal(it, &t) != nil {
					return b, invalid(field, field+" must be a string")
				}
				if t == schemas.TypeWebhookTest {
					return b, invalid(field, "webhook.test cannot be subscribed to; use POST /v1/me/webhooks/{id}/test")
				}
				if !schemas.IsWebhookTopic(t) {
					names := make([]string, len(schemas.WebhookTopics))
					for j, wt := range schemas.WebhookTopics {
						names[j] = wt.Topic
					}
					return b, invalid(field, fmt.Sprintf("unknown topic %q; subscribable topics: %s", t, strings.Join(names, ", ")))
				}
				if !slices.Contains(b.Topics, t) {
					b.Topics = append(b.Topics, t)
				}
			}
		case "description":
			b.SetDescription = true
			if string(v) == "null" {
				break
			}
			var s string
			if json.Unmarshal(v, &s) != nil {
				return b, invalid("description", "description must be a string or null")
			}
			if len([]rune(s)) > MaxDescription {
				return b, invalid("description", fmt.Sprintf("description must be at most %d characters", MaxDescription))
			}
			b.Description = &s
		case "is_active":
			if !patch {
				return b, invalid("is_active", "is_active cannot be set on creation; a new webhook is active")
			}
			var a bool
			if json.Unmarshal(v, &a) != nil {
				return b, invalid("is_active", "is_active must be true or false")
			}
			b.IsActive = &a
		default:
			allowed := "url, topics, description"
			if patch {
				allowed += ", is_active"
			}
			return b, invalid(k, fmt.Sprintf("unknown field %q; allowed: %s", k, allowed))
		}
	}
	if patch {
		if len(fields) == 0 {
			return b, invalid("", "request body must have at least 1 property: url, topics, description or is_active")
		}
		return b, nil
	}
	if b.URL == nil {
		return b, invalid("url", "url is required")
	}
	if b.Topics == nil {
		return b, invalid("topics", "topics is required")
	}
	return b, nil
}
