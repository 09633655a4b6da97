package delivery

import (
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/schemas"
)

// TestClientPayloadPreviousOnlyWhereTheInterfaceSaysSo: data.previous is
// sent on order.status_updated and tracking.updated only, even when the
// event on the log carries it (order.cancelled does).
func TestClientPayloadPreviousOnlyWhereTheInterfaceSaysSo(t *testing.T) {
	prev := json.RawMessage(`{"status":"PENDING"}`)
	for _, tc := range []struct {
		topic string
		want  bool
	}{
		{schemas.TypeOrderCreated, false},
		{schemas.TypeOrderStatusUpdated, true},
		{schemas.TypeOrderCancelled, false},
		{schemas.TypeTrackingCreated, false},
		{schemas.TypeTrackingUpdated, true},
	} {
		ev := schemas.Event{ID: uuid.New(), Type: tc.topic, OccurredAt: time.Now()}
		raw, err := clientPayload(ev, eventData{Order: schemas.OrderRef{ID: uuid.New()}, Previous: prev})
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(raw, &env); err != nil {
			t.Fatal(err)
		}
		_, has := env.Data["previous"]
		if has != tc.want {
			t.Errorf("%s: previous present = %v, want %v (%s)", tc.topic, has, tc.want, raw)
		}
		if tc.want && string(env.Data["previous"]) != string(prev) {
			t.Errorf("%s: previous = %s", tc.topic, env.Data["previous"])
		}
	}
}
