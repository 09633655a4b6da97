package order

import (
	"errors"
	"slices"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/schemas"
)

var (
	orderID = uuid.MustParse("20000000-0000-0000-0000-000000000001")
	acct    = uuid.MustParse("30000000-0000-0000-0000-000000000001")
	t0      = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
)

func cmd(kind string, mods ...func(*Command)) Command {
	c := Command{ID: uuid.New(), Kind: kind, OrderID: orderID, AccountID: acct}
	if kind == KindCreate {
		c.ReferenceID, c.StoreID = "R-1", storeA
		c.Details = &schemas.OrderDetails{CreatedVia: "api", ShippingService: "eco", AddonService: []string{}}
	}
	for _, m := range mods {
		m(&c)
	}
	return c
}

func attempt(n int) func(*Command) { return func(c *Command) { c.Attempt = n } }
func fulfil(status string, t *schemas.Tracking) func(*Command) {
	return func(c *Command) { c.Status, c.Tracking = status, t }
}

// given folds commands into a state, failing on any rejection.
func given(t *testing.T, cs []Command) State {
	t.Helper()
	var s State
	for i, c := range cs {
		evs, err := Decide(s, c, t0.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatalf("given[%d] %s: %v", i, c.Kind, err)
		}
		for _, ev := range evs {
			s = Evolve(s, ev)
		}
	}
	return s
}

func TestDecide(t *testing.T) {
	create := cmd(KindCreate)
	push := []Command{create, cmd(KindStartPush)}
	failed := append(append([]Command{}, push...), cmd(KindFailPush, attempt(1), func(c *Command) { c.Error = "503" }))
	succeeded := append(append([]Command{}, push...), cmd(KindCompletePush, attempt(1)))
	track := &schemas.Tracking{TrackingNumber: "1Z1", Carrier: "UPS", TrackingURL: "https://t.example/1Z1", ShipmentStatus: "in_transit"}
	track2 := &schemas.Tracking{TrackingNumber: "1Z1", Carrier: "UPS", TrackingURL: "https://t.example/1Z1", ShipmentStatus: "delivered"}
	retried := func(n int) []Command {
		cs := append([]Command{}, failed...)
		for i := 0; i < n; i++ {
			cs = append(cs, cmd(KindRetry), cmd(KindStartPush), cmd(KindFailPush, attempt(i+2)))
		}
		return cs
	}
	autoRetried := func(n int) []Command {
		cs := append([]Command{}, failed...)
		for i := 0; i < n; i++ {
			cs = append(cs, cmd(KindAutoRetry, attempt(i+1)), cmd(KindStartPush), cmd(KindFailPush, attempt(i+2)))
		}
		return cs
	}

	tests := []struct {
		name   string
		given  []Command
		when   Command
		then   []string // event types
		status string   // status after the events
		err    error
	}{
		{"create", nil, create, []string{schemas.TypeOrderCreated}, "PENDING", nil},
		{"create twice with one reference", []Command{create}, cmd(KindCreate), nil, "", ErrDuplicateReference},
		{"another account's order is not found", []Command{create}, cmd(KindCancel, func(c *Command) { c.AccountID = uuid.New() }), nil, "", ErrNotFound},
		{"missing order", nil, cmd(KindCancel), nil, "", ErrNotFound},
		{"start push", []Command{create}, cmd(KindStartPush), []string{schemas.TypeOrderStatusUpdated}, "PROCESSING", nil},
		{"push succeeds", push, cmd(KindCompletePush, attempt(1)), []string{schemas.TypeOrderStatusUpdated}, "SUCCESS", nil},
		{"push fails", push, cmd(KindFailPush, attempt(1)), []string{schemas.TypeOrderStatusUpdated}, "FAILED", nil},
		{"stale push result", push, cmd(KindCompletePush, attempt(7)), nil, "", ErrInvalidState},
		{"cancel pending", []Command{create}, cmd(KindCancel), []string{schemas.TypeOrderCancelled}, "CANCELLED", nil},
		{"cancel failed", failed, cmd(KindCancel), []string{schemas.TypeOrderCancelled}, "CANCELLED", nil},
		{"cancel processing", push, cmd(KindCancel), nil, "", ErrInvalidState},
		{"cancel succeeded", succeeded, cmd(KindCancel), nil, "", ErrInvalidState},
		{"cancel twice", []Command{create, cmd(KindCancel)}, cmd(KindCancel), nil, "", ErrInvalidState},
		{"push after cancel loses", []Command{create, cmd(KindCancel)}, cmd(KindStartPush), nil, "", ErrInvalidState},
		{"start of the next attempt", append(append([]Command{}, failed...), cmd(KindRetry)), cmd(KindStartPush, attempt(2)), []string{schemas.TypeOrderStatusUpdated}, "PROCESSING", nil},
		{"a start of an earlier attempt, decided again once its decision was pruned, is refused",
			append(append([]Command{}, failed...), cmd(KindRetry)), cmd(KindStartPush, attempt(1)), nil, "", ErrInvalidState},
		{"a start that names no attempt (an older release's) starts the next", append(append([]Command{}, failed...), cmd(KindRetry)), cmd(KindStartPush), []string{schemas.TypeOrderStatusUpdated}, "PROCESSING", nil},
		{"cancel after push started loses", push, cmd(KindCancel), nil, "", ErrInvalidState},
		{"retry failed", failed, cmd(KindRetry), []string{schemas.TypeOrderStatusUpdated}, "PENDING", nil},
		{"retry pending", []Command{create}, cmd(KindRetry), nil, "", ErrInvalidState},
		{"retry succeeded", succeeded, cmd(KindRetry), nil, "", ErrInvalidState},
		{"fifth retry", retried(4), cmd(KindRetry), []string{schemas.TypeOrderStatusUpdated}, "PENDING", nil},
		{"sixth retry", retried(5), cmd(KindRetry), nil, "", ErrRetryLimit},
		{"auto retry", failed, cmd(KindAutoRetry, attempt(1)), []string{schemas.TypeOrderStatusUpdated}, "PENDING", nil},
		{"third auto retry", autoRetried(2), cmd(KindAutoRetry, attempt(3)), []string{schemas.TypeOrderStatusUpdated}, "PENDING", nil},
		{"fourth auto retry", autoRetried(3), cmd(KindAutoRetry, attempt(4)), nil, "", ErrInvalidState},
		{"manual retry after auto retries ran out", autoRetried(3), cmd(KindRetry), []string{schemas.TypeOrderStatusUpdated}, "PENDING", nil},
		{"auto retry of an older attempt", append(append([]Command{}, failed...), cmd(KindRetry), cmd(KindStartPush), cmd(KindFailPush, attempt(2))), cmd(KindAutoRetry, attempt(1)), nil, "", ErrInvalidState},
		{"auto retry after cancel", append(append([]Command{}, failed...), cmd(KindCancel)), cmd(KindAutoRetry, attempt(1)), nil, "", ErrInvalidState},
		{"sync", succeeded, cmd(KindFulfillment, fulfil("SYNCED", nil)), []string{schemas.TypeOrderStatusUpdated}, "SYNCED", nil},
		{"sync pending", []Command{create}, cmd(KindFulfillment, fulfil("SYNCED", nil)), nil, "", ErrInvalidState},
		{"fulfil with tracking", succeeded, cmd(KindFulfillment, fulfil("FULFILLED", track)), []string{schemas.TypeOrderStatusUpdated, schemas.TypeTrackingCreated}, "FULFILLED", nil},
		{"fulfil synced", append(append([]Command{}, succeeded...), cmd(KindFulfillment, fulfil("SYNCED", nil))), cmd(KindFulfillment, fulfil("FULFILLED", nil)), []string{schemas.TypeOrderStatusUpdated}, "FULFILLED", nil},
		{"an update while a push is under way is held", push, cmd(KindFulfillment, fulfil("SYNCED", track)), nil, "", ErrHeld},
		{"tracking while a push is under way is held", push, cmd(KindFulfillment, fulfil("", track)), nil, "", ErrHeld},
		{"an update after a failed push is held for its retry", failed, cmd(KindFulfillment, fulfil("FULFILLED", nil)), nil, "", ErrHeld},
		{"an update for an order never pushed is refused", []Command{create}, cmd(KindFulfillment, fulfil("", track)), nil, "", ErrInvalidState},
		{"an update for a cancelled order is refused", append(append([]Command{}, failed...), cmd(KindCancel)), cmd(KindFulfillment, fulfil("SYNCED", nil)), nil, "", ErrInvalidState},
		{"tracking update", append(append([]Command{}, succeeded...), cmd(KindFulfillment, fulfil("FULFILLED", track))), cmd(KindFulfillment, fulfil("", track2)), []string{schemas.TypeTrackingUpdated}, "FULFILLED", nil},
		{"a repeated status without tracking changes nothing", append(append([]Command{}, succeeded...), cmd(KindFulfillment, fulfil("SYNCED", nil))),
			cmd(KindFulfillment, fulfil("SYNCED", nil)), nil, "SYNCED", nil},
		{"an acknowledgement read after the shipment still brings its tracking",
			append(append([]Command{}, succeeded...), cmd(KindFulfillment, fulfil("FULFILLED", track))),
			cmd(KindFulfillment, fulfil("SYNCED", track2)), []string{schemas.TypeTrackingUpdated}, "FULFILLED", nil},
		{"an acknowledgement read after the shipment without tracking changes nothing",
			append(append([]Command{}, succeeded...), cmd(KindFulfillment, fulfil("FULFILLED", nil))),
			cmd(KindFulfillment, fulfil("SYNCED", nil)), nil, "FULFILLED", nil},
		{"an update with neither status nor tracking is refused", succeeded, cmd(KindFulfillment, fulfil("", nil)), nil, "", errNoFulfillment},
		{"same tracking again", append(append([]Command{}, succeeded...), cmd(KindFulfillment, fulfil("", track))), cmd(KindFulfillment, fulfil("", track)), nil, "SUCCESS", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := given(t, tt.given)
			evs, err := Decide(s, tt.when, t0.Add(time.Hour))
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				if len(evs) != 0 {
					t.Fatalf("a rejected command emitted %d events", len(evs))
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(evs) != len(tt.then) {
				t.Fatalf("%d events, want %v", len(evs), tt.then)
			}
			for i, ev := range evs {
				if ev.Type != tt.then[i] {
					t.Fatalf("event %d is %s, want %s", i, ev.Type, tt.then[i])
				}
				s = Evolve(s, ev)
			}
			if s.Status != tt.status {
				t.Fatalf("status %s, want %s", s.Status, tt.status)
			}
		})
	}
}

func TestEventsCarryPreviousAndStableIDs(t *testing.T) {
	s := given(t, []Command{cmd(KindCreate), cmd(KindStartPush)})
	c := cmd(KindFailPush, attempt(1), func(c *Command) { c.Error = "platform said 503" })
	a, _ := Decide(s, c, t0)
	b, _ := Decide(s, c, t0.Add(time.Second))
	if a[0].ID != b[0].ID {
		t.Fatal("deciding one command twice must give the same event id")
	}
	var d schemas.OrderEventData
	if err := a[0].Decode(&d); err != nil {
		t.Fatal(err)
	}
	var prev map[string]string
	_ = json.Unmarshal(d.Previous, &prev)
	if prev["status"] != "PROCESSING" || *d.Order.ClientStatus != "FAILED" || d.Push == nil || d.Push.Error != "platform said 503" || d.Push.Attempt != 1 {
		t.Fatalf("event data %+v previous %v", d, prev)
	}
	if d.Order.ID != orderID || d.Order.ReferenceID != "R-1" || d.Order.StoreID != storeA {
		t.Fatalf("order ref %+v", d.Order)
	}

	s = given(t, []Command{cmd(KindCreate), cmd(KindStartPush), cmd(KindCompletePush, attempt(1)),
		cmd(KindFulfillment, fulfil("", &schemas.Tracking{TrackingNumber: "A", Carrier: "UPS", TrackingURL: "u", ShipmentStatus: "in_transit"}))})
	evs, err := Decide(s, cmd(KindFulfillment, fulfil("", &schemas.Tracking{TrackingNumber: "A", Carrier: "DHL", TrackingURL: "u", ShipmentStatus: "delivered"})), t0)
	if err != nil {
		t.Fatal(err)
	}
	d, prev = schemas.OrderEventData{}, nil
	_ = evs[0].Decode(&d)
	_ = json.Unmarshal(d.Previous, &prev)
	if len(prev) != 2 || prev["carrier"] != "UPS" || prev["shipment_status"] != "in_transit" || *d.Order.ShipmentStatus != "delivered" {
		t.Fatalf("tracking.updated previous %v order %+v", prev, d.Order)
	}
}

// TestTrackingReportedBeforeTheOrdersIsOlderNews: updates of one order can
// be read in another order than they were sent (two senders, a resend). A
// tracking report sent before the one the order holds changes nothing,
// while its status still applies; a later one, or one that does not say
// when it was sent (an update from before the field), applies.
func TestTrackingReportedBeforeTheOrdersIsOlderNews(t *testing.T) {
	at := func(minutes int) func(*Command) {
		return func(c *Command) {
			r := t0.Add(time.Duration(minutes) * time.Minute)
			c.ReportedAt = &r
		}
	}
	delivered := &schemas.Tracking{TrackingNumber: "A", Carrier: "UPS", TrackingURL: "https://ups.example/A", ShipmentStatus: "delivered"}
	inTransit := &schemas.Tracking{TrackingNumber: "A", Carrier: "UPS", TrackingURL: "https://ups.example/A", ShipmentStatus: "in_transit"}
	shipped := []Command{cmd(KindCreate), cmd(KindStartPush), cmd(KindCompletePush, attempt(1)),
		cmd(KindFulfillment, fulfil("SYNCED", delivered), at(10))}
	for _, tc := range []struct {
		name     string
		when     Command
		then     []string
		shipment string // the tracking's shipment status after
	}{
		{"a report sent before the order's tracking changes nothing", cmd(KindFulfillment, fulfil("", inTransit), at(5)), nil, "delivered"},
		{"a report sent before still moves the status", cmd(KindFulfillment, fulfil("FULFILLED", inTransit), at(5)),
			[]string{schemas.TypeOrderStatusUpdated}, "delivered"},
		{"a report sent after applies", cmd(KindFulfillment, fulfil("", inTransit), at(15)), []string{schemas.TypeTrackingUpdated}, "in_transit"},
		{"a report that does not say when it was sent applies", cmd(KindFulfillment, fulfil("", inTransit)),
			[]string{schemas.TypeTrackingUpdated}, "in_transit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := given(t, shipped)
			evs, err := Decide(s, tc.when, t0.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, ev := range evs {
				types = append(types, ev.Type)
				s = Evolve(s, ev)
			}
			if !slices.Equal(types, tc.then) || s.Tracking == nil || s.Tracking.ShipmentStatus != tc.shipment {
				t.Fatalf("events %v, tracking %+v; want %v and shipment %s", types, s.Tracking, tc.then, tc.shipment)
			}
		})
	}
}

func TestHeldUpdatesWaitForAPushToSucceed(t *testing.T) {
	push := []Command{cmd(KindCreate), cmd(KindStartPush)}
	// holding is the order after push and more, given n updates to hold,
	// with their ids in the order given.
	holding := func(n int, more ...Command) func() (State, []uuid.UUID) {
		return func() (State, []uuid.UUID) {
			s := given(t, append(append([]Command{}, push...), more...))
			var ids []uuid.UUID
			for range n {
				c := cmd(KindFulfillment, fulfil("SYNCED", nil))
				var err error
				if s, err = Hold(s, c); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, c.ID)
			}
			return s, ids
		}
	}
	tests := []struct {
		name     string
		order    func() (State, []uuid.UUID)
		released bool // Release gives back every update held, in the order given
		left     int  // updates still held after it
	}{
		{"a push still under way keeps them", holding(2), false, 2},
		{"a failed push keeps them for its retry", holding(2, cmd(KindFailPush, attempt(1))), false, 2},
		{"a succeeded push releases them in the order they came", holding(3, cmd(KindCompletePush, attempt(1))), true, 0},
		{"a cancelled order drops them", holding(2, cmd(KindFailPush, attempt(1)), cmd(KindCancel)), false, 0},
		{"an order holding none releases none", holding(0, cmd(KindCompletePush, attempt(1))), true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ids := tt.order()
			s, released := Release(s)
			var got []uuid.UUID
			for _, c := range released {
				got = append(got, c.ID)
			}
			if want := map[bool][]uuid.UUID{true: ids}[tt.released]; !slices.Equal(got, want) || len(s.Held) != tt.left {
				t.Fatalf("released %v, %d left; want %v and %d", got, len(s.Held), want, tt.left)
			}
		})
	}
	t.Run("an order holds at most MaxHeld", func(t *testing.T) {
		s, _ := holding(MaxHeld)()
		if _, err := Hold(s, cmd(KindFulfillment, fulfil("SYNCED", nil))); !errors.Is(err, ErrInvalidState) {
			t.Fatalf("err = %v, want %v", err, ErrInvalidState)
		}
	})
}
