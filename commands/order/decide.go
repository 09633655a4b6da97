package order

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/schemas"
)

// Limits of the order lifecycle.
const (
	MaxManualRetries = 5
	MaxAutoRetries   = 3
	// MaxHeld bounds the fulfillment updates an order holds (State.Held).
	MaxHeld = 8
)

// Command kinds on TopicOrderCommands.
const (
	KindCreate       = "create"
	KindStartPush    = "start_push"
	KindCompletePush = "complete_push"
	KindFailPush     = "fail_push"
	KindAutoRetry    = "auto_retry"
	KindRetry        = "retry"
	KindCancel       = "cancel"
	KindFulfillment  = "fulfillment"
)

// Command is one order command. ID identifies it, so the sender can wait for
// its decision; OrderID is the record key, so one decider owns each order.
type Command struct {
	ID        uuid.UUID `json:"id"`
	Kind      string    `json:"kind"`
	OrderID   uuid.UUID `json:"order_id"`
	AccountID uuid.UUID `json:"account_id"`

	// create
	ReferenceID string                `json:"reference_id,omitempty"`
	StoreID     uuid.UUID             `json:"store_id,omitempty"`
	Details     *schemas.OrderDetails `json:"details,omitempty"`

	// pushes
	Attempt             int    `json:"attempt,omitempty"`
	Error               string `json:"error,omitempty"`
	PlatformOrderID     string `json:"platform_order_id,omitempty"`
	PlatformOrderNumber string `json:"platform_order_number,omitempty"`

	// fulfillment
	Status   string            `json:"status,omitempty"`
	Tracking *schemas.Tracking `json:"tracking,omitempty"`
	// ReportedAt is when production or the carrier sent the update (its
	// sent_at): tracking reported before the order's last applied
	// tracking is older news and does not apply.
	ReportedAt *time.Time `json:"reported_at,omitempty"`
}

// Decision errors. Each maps to one API error (see http/).
var (
	ErrDuplicateReference = errors.New("an order with this reference_id already exists in the store")
	ErrNotFound           = errors.New("order not found")
	ErrInvalidState       = errors.New("the order's status does not allow this")
	ErrRetryLimit         = errors.New("the order was already retried the maximum number of times")
	// ErrHeld is no refusal: a fulfillment update came while a push of the
	// order was under way and none had succeeded yet. The decider holds it
	// (Hold) and applies it once a push succeeds.
	ErrHeld = errors.New("held until a push of the order succeeds")
)

// StateError is a rejection because of the order's status.
type StateError struct {
	Err    error
	Status string
	Action string
}

func (e *StateError) Error() string {
	return fmt.Sprintf("cannot %s an order in status %s", e.Action, e.Status)
}
func (e *StateError) Unwrap() error { return e.Err }

// State is what the decider keeps of one order.
type State struct {
	Exists        bool              `json:"exists"`
	Order         schemas.OrderRef  `json:"order"`
	Status        string            `json:"status"`
	ManualRetries int               `json:"manual_retries"`
	AutoRetries   int               `json:"auto_retries"`
	PushAttempts  int               `json:"push_attempts"`
	Tracking      *schemas.Tracking `json:"tracking,omitempty"`
	// TrackingReportedAt is when the tracking applied last was reported.
	TrackingReportedAt *time.Time `json:"tracking_reported_at,omitempty"`
	// Held are fulfillment updates that came before the decider knew the
	// platform had the order: a push's outcome can be decided late (its
	// worker stopped after the call, and the call is taken over when its
	// lease ends, or the push failed on a timeout and is retried), while
	// production already acknowledges the order. They apply, in the order
	// they came, once a push succeeds (Release).
	Held []Command `json:"held,omitempty"`
}

// pushUnsettled says whether a push of the order began and none has
// succeeded yet: an update from production may then be ahead of the
// push's outcome.
func pushUnsettled(s State) bool {
	switch s.Status {
	case schemas.StatusProcessing, schemas.StatusFailed, schemas.StatusPending:
		return s.PushAttempts > 0
	}
	return false
}

// Hold keeps fulfillment update c, which Decide answered with ErrHeld,
// until a push of the order succeeds. An order holds at most MaxHeld.
func Hold(s State, c Command) (State, error) {
	if len(s.Held) >= MaxHeld {
		return s, &StateError{Err: ErrInvalidState, Status: s.Status, Action: "hold one more fulfillment update of"}
	}
	s.Held = append(slices.Clip(s.Held), c)
	return s, nil
}

// Release takes the held updates that are now to be decided (those of an
// order whose push succeeded, in the order they came) out of s. An order
// cancelled drops them: its push will not succeed.
func Release(s State) (State, []Command) {
	held := s.Held
	switch {
	case len(held) == 0:
		return s, nil
	case s.Status == schemas.StatusCancelled:
		s.Held = nil
		return s, nil
	case pushUnsettled(s):
		return s, nil
	}
	s.Held = nil
	return s, held
}

// Decide returns the events a command causes on an order in state s, or why
// it is rejected. It is pure: no I/O, time comes in as now.
func Decide(s State, c Command, now time.Time) ([]schemas.Event, error) {
	now = now.UTC()
	if c.Kind == KindCreate {
		if s.Exists {
			return nil, ErrDuplicateReference
		}
		if c.Details == nil {
			return nil, errors.New("create command without details")
		}
		ref := schemas.OrderRef{ID: c.OrderID, ReferenceID: c.ReferenceID, StoreID: c.StoreID, AccountID: c.AccountID,
			ClientStatus: ptr(schemas.StatusPending), CreatedAt: now, UpdatedAt: now}
		ev, err := event(c, 0, schemas.TypeOrderCreated, now, schemas.OrderEventData{Order: ref, Created: c.Details})
		return one(ev, err)
	}
	// Client commands carry the caller's account: another account's order
	// is not found. System commands (pusher, fulfillment) carry none.
	if !s.Exists || (c.AccountID != uuid.Nil && s.Order.AccountID != c.AccountID) {
		return nil, ErrNotFound
	}
	reject := func(err error, action string) ([]schemas.Event, error) {
		return nil, &StateError{Err: err, Status: s.Status, Action: action}
	}
	switch c.Kind {
	case KindStartPush:
		// A start names the attempt it starts (0 from a release before
		// that): one of an earlier attempt, decided again once its
		// decision was pruned (a replay, a log read again from its start),
		// would otherwise start the attempt the next start is for, and no
		// worker would make that call.
		if s.Status != schemas.StatusPending || c.Attempt != 0 && c.Attempt != s.PushAttempts+1 {
			return reject(ErrInvalidState, "push")
		}
		return statusChange(s, c, schemas.StatusProcessing, now, &schemas.PushAttempt{Attempt: s.PushAttempts + 1})
	case KindCompletePush:
		if s.Status != schemas.StatusProcessing || c.Attempt != s.PushAttempts {
			return reject(ErrInvalidState, "complete a push of")
		}
		return statusChange(s, c, schemas.StatusSuccess, now, &schemas.PushAttempt{Attempt: c.Attempt,
			PlatformOrderID: c.PlatformOrderID, PlatformOrderNumber: c.PlatformOrderNumber})
	case KindFailPush:
		if s.Status != schemas.StatusProcessing || c.Attempt != s.PushAttempts {
			return reject(ErrInvalidState, "fail a push of")
		}
		return statusChange(s, c, schemas.StatusFailed, now, &schemas.PushAttempt{Attempt: c.Attempt, Error: c.Error, AutoRetries: s.AutoRetries})
	case KindAutoRetry:
		if s.Status != schemas.StatusFailed || c.Attempt != s.PushAttempts || s.AutoRetries >= MaxAutoRetries {
			return reject(ErrInvalidState, "automatically retry")
		}
		return statusChange(s, c, schemas.StatusPending, now, &schemas.PushAttempt{Attempt: c.Attempt, Automatic: true})
	case KindRetry:
		if s.Status != schemas.StatusFailed {
			return reject(ErrInvalidState, "retry")
		}
		if s.ManualRetries >= MaxManualRetries {
			return reject(ErrRetryLimit, "retry")
		}
		return statusChange(s, c, schemas.StatusPending, now, nil)
	case KindCancel:
		if s.Status != schemas.StatusPending && s.Status != schemas.StatusFailed {
			return reject(ErrInvalidState, "cancel")
		}
		return transition(s, c, schemas.TypeOrderCancelled, schemas.StatusCancelled, now, nil)
	case KindFulfillment:
		return decideFulfillment(s, c, now)
	}
	return nil, fmt.Errorf("unknown order command kind %q", c.Kind)
}

// olderTracking says whether c's tracking was reported before the
// tracking the order holds (updates of one order may be read out of the
// order they were sent in, e.g. from two senders).
func olderTracking(s State, c Command) bool {
	return c.ReportedAt != nil && s.TrackingReportedAt != nil && c.ReportedAt.Before(*s.TrackingReportedAt)
}

// errNoFulfillment refuses a fulfillment update that says nothing.
var errNoFulfillment = errors.New("fulfillment update with neither status nor tracking")

func decideFulfillment(s State, c Command, now time.Time) ([]schemas.Event, error) {
	var out []schemas.Event
	if c.Status == "" && c.Tracking == nil {
		return nil, errNoFulfillment
	}
	if c.Status != "" && c.Status != schemas.StatusSynced && c.Status != schemas.StatusFulfilled {
		return nil, fmt.Errorf("fulfillment status %q is not SYNCED or FULFILLED", c.Status)
	}
	if pushUnsettled(s) {
		return nil, ErrHeld
	}
	next := s
	status := c.Status
	if status == s.Status || status == schemas.StatusSynced && s.Status == schemas.StatusFulfilled {
		// Repeated (a carrier resending it) or passed (production's
		// acknowledgement read after the shipment): only tracking may be
		// new, and an update with none changes nothing.
		status = ""
	}
	switch status {
	case "":
	case schemas.StatusSynced:
		if s.Status != schemas.StatusSuccess {
			return nil, &StateError{Err: ErrInvalidState, Status: s.Status, Action: "sync"}
		}
	case schemas.StatusFulfilled:
		if s.Status != schemas.StatusSuccess && s.Status != schemas.StatusSynced {
			return nil, &StateError{Err: ErrInvalidState, Status: s.Status, Action: "fulfil"}
		}
	}
	if status != "" {
		evs, err := statusChange(s, c, status, now, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
		next = Evolve(next, evs[0])
	}
	if t := c.Tracking; t != nil && olderTracking(s, c) {
		return out, nil // a carrier's report read after a later one: news already passed
	}
	if t := c.Tracking; t != nil {
		if s.Status != schemas.StatusSuccess && s.Status != schemas.StatusSynced && s.Status != schemas.StatusFulfilled {
			return nil, &StateError{Err: ErrInvalidState, Status: s.Status, Action: "track"}
		}
		ref := next.Order
		ref.UpdatedAt = now
		ref.ShipmentStatus = nonEmpty(t.ShipmentStatus)
		data := schemas.OrderEventData{Order: ref, Tracking: t, TrackingReportedAt: c.ReportedAt}
		typ := schemas.TypeTrackingCreated
		if old := next.Tracking; old != nil {
			changed := map[string]string{}
			if old.TrackingNumber != t.TrackingNumber {
				changed["tracking_number"] = old.TrackingNumber
			}
			if old.Carrier != t.Carrier {
				changed["carrier"] = old.Carrier
			}
			if old.TrackingURL != t.TrackingURL {
				changed["tracking_url"] = old.TrackingURL
			}
			if old.ShipmentStatus != t.ShipmentStatus {
				changed["shipment_status"] = old.ShipmentStatus
			}
			if len(changed) == 0 {
				return out, nil // the same tracking again: nothing new
			}
			typ = schemas.TypeTrackingUpdated
			data.Previous, _ = codec.Marshal(changed)
		}
		ev, err := event(c, len(out), typ, now, data)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, nil
}

func statusChange(s State, c Command, to string, now time.Time, push *schemas.PushAttempt) ([]schemas.Event, error) {
	return transition(s, c, schemas.TypeOrderStatusUpdated, to, now, push)
}

func transition(s State, c Command, typ, to string, now time.Time, push *schemas.PushAttempt) ([]schemas.Event, error) {
	ref := s.Order
	ref.ClientStatus, ref.UpdatedAt = ptr(to), now
	prev, _ := codec.Marshal(map[string]string{"status": s.Status})
	ev, err := event(c, 0, typ, now, schemas.OrderEventData{Order: ref, Tracking: s.Tracking, Previous: prev, Push: push})
	return one(ev, err)
}

// Evolve applies an event to the state.
func Evolve(s State, ev schemas.Event) State {
	var d schemas.OrderEventData
	if err := ev.Decode(&d); err != nil {
		return s
	}
	switch ev.Type {
	case schemas.TypeOrderCreated:
		return State{Exists: true, Order: d.Order, Status: schemas.StatusPending}
	case schemas.TypeOrderStatusUpdated, schemas.TypeOrderCancelled:
		var prev struct{ Status string }
		_ = codec.Unmarshal(d.Previous, &prev)
		if d.Order.ClientStatus == nil {
			return s
		}
		to := *d.Order.ClientStatus
		if to == schemas.StatusPending && prev.Status == schemas.StatusFailed {
			if d.Push != nil && d.Push.Automatic {
				s.AutoRetries++
			} else {
				s.ManualRetries++
			}
		}
		if to == schemas.StatusProcessing && d.Push != nil {
			s.PushAttempts = d.Push.Attempt
		}
		s.Status = to
	case schemas.TypeTrackingCreated, schemas.TypeTrackingUpdated:
		s.Tracking = d.Tracking
		if d.TrackingReportedAt != nil {
			s.TrackingReportedAt = d.TrackingReportedAt
		}
	}
	s.Order = d.Order
	return s
}

// event builds an event whose id derives from the command id and the event's
// place in the decision, so deciding the same command again (after a crash
// before the offsets committed) yields the same event ids.
func event(c Command, n int, typ string, now time.Time, data schemas.OrderEventData) (schemas.Event, error) {
	id := uuid.NewSHA1(c.ID, []byte(fmt.Sprintf("event/%d", n)))
	return schemas.NewEventWithID(id, typ, now, data)
}

func one(ev schemas.Event, err error) ([]schemas.Event, error) {
	if err != nil {
		return nil, err
	}
	return []schemas.Event{ev}, nil
}

func ptr(s string) *string { return &s }

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
