// Package delivery sends events to clients' webhooks: fan-out of order
// events to delivery tasks, the sender with its retry tiers, request
// signing, the URL guard and the Redis failure streaks.
package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// FanoutName is the fan-out consumer's group and offsets key.
const FanoutName = "delivery.fanout"

// DeliveryID is the id of the delivery of one event to one webhook: the
// same pair always gets the same id, so a repeated fan-out makes no second
// delivery.
func DeliveryID(webhookID, eventID uuid.UUID) uuid.UUID {
	return uuid.NewSHA1(webhookID, eventID[:])
}

// clientOrder is data.order as clients receive it.
type clientOrder struct {
	ID             uuid.UUID `json:"id"`
	ReferenceID    string    `json:"reference_id"`
	StoreID        uuid.UUID `json:"store_id"`
	ClientStatus   *string   `json:"client_status"`
	ShipmentStatus *string   `json:"shipment_status"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

type clientData struct {
	Order    clientOrder       `json:"order"`
	Tracking *schemas.Tracking `json:"tracking"`
	Previous json.RawMessage   `json:"previous,omitempty"`
}

// clientPayload turns an order event (its data decoded as d) into the
// envelope webhooks receive: the same id, topic and time, and data {order,
// tracking, previous?} as the interface defines it (internal fields such as
// the account are left out).
func clientPayload(ev schemas.Event, d eventData) (json.RawMessage, error) {
	o := d.Order
	data := clientData{Order: clientOrder{ID: o.ID, ReferenceID: o.ReferenceID, StoreID: o.StoreID, ClientStatus: o.ClientStatus,
		ShipmentStatus: o.ShipmentStatus, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt}, Tracking: d.Tracking}
	if ev.Type == schemas.TypeOrderStatusUpdated || ev.Type == schemas.TypeTrackingUpdated {
		// The interface: previous only on these two topics (the order.cancelled
		// event carries it on the log, for consumers of the topic).
		data.Previous = d.Previous
	}
	env, err := schemas.NewEventWithID(ev.ID, ev.Type, ev.OccurredAt, data)
	if err != nil {
		return nil, err
	}
	return codec.Marshal(env)
}

// eventData is what the fan-out reads of an order event's data: the
// fields of the client's payload, not the created order's details (the
// bulk of an order.created record), which it would only decode to drop.
type eventData struct {
	Order    schemas.OrderRef  `json:"order"`
	Tracking *schemas.Tracking `json:"tracking"`
	Previous json.RawMessage   `json:"previous,omitempty"`
}

// TaskRecord is the record of a delivery task on topic.
func TaskRecord(topic string, t schemas.DeliveryTask) (*kgo.Record, error) {
	value, err := codec.Marshal(t)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: topic, Key: []byte(t.WebhookID.String()), Value: value}, nil
}

// Fanout turns order events into one delivery task per subscribed active
// webhook of the order's client, on pod.webhook.deliveries. Its handler
// returns the tasks (the runner produces them before the consumed offsets
// commit); a batch done again after a crash emits the same tasks, ids and
// times derived from the event, which the sender and the delivery log take
// once.
type Fanout struct {
	Log    *slog.Logger
	Naming schemas.Naming // topic names on the cluster
}

// Consumer is the fan-out's stream consumer.
func (f *Fanout) Consumer() stream.Consumer {
	return stream.Consumer{Name: FanoutName, Topics: []string{f.Naming.Topic(schemas.TopicOrderEvents)}, Handle: f.handle, MaxBatch: 1000}
}

type subscription struct {
	id     uuid.UUID
	topics []string
	gen    int
}

func (f *Fanout) handle(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
	type item struct {
		ev   schemas.Event
		data eventData
	}
	var items []item
	var accounts []uuid.UUID
	for _, r := range recs {
		// A record that cannot be decoded is dead-lettered by the runner;
		// the rest go on.
		ev, err := schemas.ParseEvent(r.Value)
		if err != nil {
			return nil, stream.Poison(fmt.Errorf("order event record %d/%d: %w", r.Partition, r.Offset, err))
		}
		if !schemas.IsWebhookTopic(ev.Type) {
			continue
		}
		var d eventData
		if err := ev.Decode(&d); err != nil {
			return nil, stream.Poison(fmt.Errorf("order event %s: %w", ev.ID, err))
		}
		items = append(items, item{ev: ev, data: d})
		if !slices.Contains(accounts, d.Order.AccountID) {
			accounts = append(accounts, d.Order.AccountID)
		}
	}
	if len(items) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `SELECT id, account_id, topics, gen FROM webhooks WHERE account_id = ANY($1) AND is_active`, accounts)
	if err != nil {
		return nil, fmt.Errorf("load subscriptions: %w", err)
	}
	subs := map[uuid.UUID][]subscription{}
	var s subscription
	var account uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&s.id, &account, &s.topics, &s.gen}, func() error {
		subs[account] = append(subs[account], subscription{id: s.id, topics: slices.Clone(s.topics), gen: s.gen})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load subscriptions: %w", err)
	}
	var out []*kgo.Record
	for _, it := range items {
		at := it.ev.OccurredAt.UTC()
		account := it.data.Order.AccountID
		var payload json.RawMessage // made once, for the first subscriber
		for _, sub := range subs[account] {
			if !slices.Contains(sub.topics, it.ev.Type) {
				continue
			}
			if payload == nil {
				if payload, err = clientPayload(it.ev, it.data); err != nil {
					return nil, err
				}
			}
			rec, err := TaskRecord(f.Naming.Topic(schemas.TopicWebhookDeliveries), schemas.DeliveryTask{
				DeliveryID: DeliveryID(sub.id, it.ev.ID), WebhookID: sub.id, AccountID: account, EventID: it.ev.ID,
				Topic: it.ev.Type, Gen: sub.gen, Run: 1, Attempt: 1, DueAt: at, CreatedAt: at, Payload: payload,
			})
			if err != nil {
				return nil, err
			}
			out = append(out, rec)
		}
	}
	return out, nil
}
