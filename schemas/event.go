package schemas

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
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
}

// NewEvent wraps data in an envelope with a fresh random id.
func NewEvent(typ string, at time.Time, data any) (Event, error) {
	return NewEventWithID(uuid.New(), typ, at, data)
}

// NewEventWithID wraps data in an envelope with the given id.
func NewEventWithID(id uuid.UUID, typ string, at time.Time, data any) (Event, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("encode %s: %w", typ, err)
	}
	return Event{ID: id, Type: typ, OccurredAt: at.UTC(), Data: raw}, nil
}

// Decode unmarshals the event's data into v.
func (e Event) Decode(v any) error {
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("decode %s %s: %w", e.Type, e.ID, err)
	}
	return nil
}

// ParseEvent decodes a record value into an envelope.
func ParseEvent(value []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(value, &e); err != nil {
		return Event{}, fmt.Errorf("decode event envelope: %w", err)
	}
	if e.Type == "" || e.ID == uuid.Nil {
		return Event{}, fmt.Errorf("decode event envelope: missing id or type")
	}
	return e, nil
}
