package order

import (
	"strconv"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/jobs"
	"github.com/printpod/pod/schemas"
)

// PushQueue is the job queue of pushes: one job per order, id the order
// id, kept by the decider in the transaction that decides the order.
const PushQueue = "push"

// Steps of a push job: what its worker does next.
const (
	StepStart     = "start"      // send start_push for Attempt; once it is decided, the call
	StepAutoRetry = "auto_retry" // send auto_retry for Attempt (due after the retry delay)
	StepParked    = "parked"     // failed until a manual retry, while one may come; never due
	// StepCall (call the platform for Attempt) is no longer written: the
	// job stays at its start while the order is PROCESSING. Releases
	// before it put the call step when the start was decided; workers
	// still work such a job.
	StepCall = "call"
)

// PlatformOrder is the body of an order sent to the store platform.
type PlatformOrder struct {
	OrderID         uuid.UUID       `json:"order_id"`
	ReferenceID     string          `json:"reference_id"`
	Customer        json.RawMessage `json:"customer,omitempty"`
	ShippingAddress json.RawMessage `json:"shipping_address,omitempty"`
	LabelLink       string          `json:"label_link,omitempty"`
	TrackingNumber  string          `json:"tracking_number,omitempty"`
	ShippingService string          `json:"shipping_service"`
	LineItems       json.RawMessage `json:"line_items"`
	Note            string          `json:"note,omitempty"`
	Tags            string          `json:"tags,omitempty"`
}

// PushJob is the payload of an order's push job, written when the order is
// created: where and what to push, under which idempotency key.
type PushJob struct {
	StoreID        uuid.UUID     `json:"store_id"`
	IdempotencyKey uuid.UUID     `json:"idempotency_key"`
	Order          PlatformOrder `json:"order"`
}

// JobCommandID is the id of the command a push job's step sends for an
// attempt: a step worked twice sends a command the decider already decided.
func JobCommandID(orderID uuid.UUID, kind string, attempt int) uuid.UUID {
	return uuid.NewSHA1(orderID, []byte(kind+"/"+strconv.Itoa(attempt)))
}

// pushEffect is what an accepted event does to the order's push job, given
// the state after it: its status tells the step. created are the details
// of the create command (for order.created); retryDelays are the waits
// before the automatic retries.
func (o *orderRow) pushEffect(ev schemas.Event, created *schemas.OrderDetails, retryDelays []time.Duration) error {
	s := o.state
	id := s.Order.ID
	switch s.Status {
	case schemas.StatusPending:
		j := jobs.Job{ID: id, Step: StepStart, Attempt: s.PushAttempts + 1, DueAt: ev.OccurredAt}
		if ev.Type == schemas.TypeOrderCreated && created != nil {
			c := created
			payload, err := codec.Marshal(PushJob{StoreID: s.Order.StoreID, IdempotencyKey: c.IdempotencyKey, Order: PlatformOrder{
				OrderID: id, ReferenceID: s.Order.ReferenceID, Customer: c.Customer, ShippingAddress: c.ShippingAddress,
				LabelLink: c.LabelLink, TrackingNumber: c.TrackingNumber, ShippingService: c.ShippingService,
				LineItems: c.Lines, Note: c.Note, Tags: c.Tags}})
			if err != nil {
				return err
			}
			j.Payload = payload
		}
		o.putJob(j)
	case schemas.StatusProcessing:
		// The job stays as its start left it: leased to the worker that
		// sent start_push, which makes the call. Should that worker stop
		// before the outcome is decided, the lease runs out and the next
		// worker sends start_push again, finds it decided, and calls.
	case schemas.StatusFailed:
		switch n := s.AutoRetries; {
		case n < len(retryDelays) && n < MaxAutoRetries:
			o.putJob(jobs.Job{ID: id, Step: StepAutoRetry, Attempt: s.PushAttempts, DueAt: ev.OccurredAt.Add(retryDelays[n])})
		case s.ManualRetries < MaxManualRetries:
			o.putJob(jobs.Job{ID: id, Step: StepParked, Attempt: s.PushAttempts, DueAt: jobs.Parked})
		default:
			// No retry can come: nothing needs the push's content (the
			// customer's name and address) any more.
			o.job, o.dropJob = nil, true
		}
	case schemas.StatusSuccess, schemas.StatusCancelled:
		o.job, o.dropJob = nil, true
	}
	return nil
}

// putJob makes j the job's next state, keeping the payload an earlier
// change of the batch set when j has none (as jobs.Writes.Put does with
// the stored one).
func (o *orderRow) putJob(j jobs.Job) {
	if j.Payload == nil && o.job != nil {
		j.Payload = o.job.Payload
	}
	o.job, o.dropJob = &j, false
}
