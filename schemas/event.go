package schemas

import (
	"fmt"
	"reflect"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/internal/codec"
)

// Event is the envelope of every record value on the pod.* event topics, in
// the same shape webhooks deliver: {id, topic, created_at, data}. ID is
// stable: a republished event keeps its ID, so consumers dedupe on it. Type
// is the event's topic in the interface's sense (order.created), not the
// Kafka topic.
type Event struct {
	ID         uuid.UUID       `json:"id"`
	Type       string          `json:"topic"`
	OccurredAt time.Time       `json:"created_at"`
	Data       json.RawMessage `json:"data"`
	// value is the data as built, kept by NewEventWithID so that the
	// process that made the event (the order decider evolving its state)
	// reads it without decoding Data again. Never on an event read from a
	// record.
	value any
}

// NewEvent wraps data in an envelope with a fresh random id.
func NewEvent(typ string, at time.Time, data any) (Event, error) {
	return NewEventWithID(uuid.New(), typ, at, data)
}

// NewEventWithID wraps data in an envelope with the given id.
func NewEventWithID(id uuid.UUID, typ string, at time.Time, data any) (Event, error) {
	raw, err := codec.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("encode %s: %w", typ, err)
	}
	return Event{ID: id, Type: typ, OccurredAt: at.UTC(), Data: raw, value: data}, nil
}

// Decode unmarshals the event's data into v: a copy of the data it was
// built from, when that is what v points to.
func (e Event) Decode(v any) error {
	if e.value != nil {
		if dst := reflect.ValueOf(v); dst.Kind() == reflect.Pointer && !dst.IsNil() {
			if src := reflect.ValueOf(e.value); src.Type() == dst.Elem().Type() {
				dst.Elem().Set(src)
				return nil
			}
		}
	}
	if err := codec.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("decode %s %s: %w", e.Type, e.ID, err)
	}
	return nil
}

// ParseEvent decodes a record value into an envelope.
func ParseEvent(value []byte) (Event, error) {
	var e Event
	if err := codec.Unmarshal(value, &e); err != nil {
		return Event{}, fmt.Errorf("decode event envelope: %w", err)
	}
	if e.Type == "" || e.ID == uuid.Nil {
		return Event{}, fmt.Errorf("decode event envelope: missing id or type")
	}
	return e, nil
}
