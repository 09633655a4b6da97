package order

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/rdb"
	"github.com/printpod/pod/schemas"
	"github.com/redis/go-redis/v9"
)

// SoftDuplicateWindow is how long an order's content blocks an identical
// order (unless force is true).
const SoftDuplicateWindow = 24 * time.Hour

// CreateInput is one create-order request.
type CreateInput struct {
	AccountID uuid.UUID
	Body      []byte
	Via       string // created_via
	// CommandID identifies the create command. A batch item passes an id
	// derived from its batch and position, so working it twice finds the
	// first decision instead of creating a second order.
	CommandID uuid.UUID
	// Sent: an earlier attempt put CommandID's create on the log and it
	// was not decided then. The create waits for that decision instead of
	// validating against today's catalog and sending again: the decider
	// will decide the command as it was sent.
	Sent bool
	// MaybeSent: an earlier attempt may have put CommandID's create on the
	// log without a record of it (it stopped between the send and that
	// record, or its send failed in flight). The create looks for its
	// decision once the decider has read the log up to LogEnd (as it
	// reaches now when nil), before it validates against today's catalog
	// and sends.
	MaybeSent bool
	LogEnd    map[int32]int64
	// DefaultReference is used when the body has no reference_id.
	DefaultReference string
	// BeforeSend, when set, is called with the order's id before its
	// command is sent: a caller that waits for what follows the decision
	// (the read model) subscribes there, so it cannot miss it.
	BeforeSend func(orderID uuid.UUID)
}

// Created is an accepted create.
type Created struct {
	Decision Decision
	Draft    Draft
	OrderID  uuid.UUID
	Details  schemas.OrderDetails
	// Repeat says the command was decided before (a keyed request or a
	// batch item worked again): only Decision and OrderID are set; the
	// order is as the read model holds it (prices may have changed since
	// it was priced, so the request is not read again).
	Repeat bool
}

// MaxCommandBytes bounds an encoded command (Record refuses larger ones). A
// create's event carries the same details, and both must stay well inside
// Kafka's default 1 MB record limit: an order that could not be published
// must never be accepted.
const MaxCommandBytes = 768 << 10

// TooLargeError is an order whose priced form exceeds MaxCommandBytes.
type TooLargeError struct{ Size int }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the order is too large to process (%d KiB once priced; the limit is %d KiB): send fewer or shorter lines", e.Size>>10, MaxCommandBytes>>10)
}

// Rejected is a create (or other command) the decider refused.
type Rejected struct{ Code, Message string }

func (e *Rejected) Error() string { return e.Message }

// DuplicateOrderError is the soft duplicate: the same content within 24 h.
type DuplicateOrderError struct{ OrderID uuid.UUID }

func (e *DuplicateOrderError) Error() string {
	return fmt.Sprintf("an order with the same content was created in the last 24 hours (%s); send force: true to create it anyway", e.OrderID)
}

// Creator runs a create-order request through validation, the soft
// duplicate check and the decider.
type Creator struct {
	Catalog Catalog
	Bus     *Bus
	Redis   redis.Cmdable
	Prefix  string
	Log     *slog.Logger
	Wait    time.Duration // for the decision; default 10s
}

func (c *Creator) wait() time.Duration {
	if c.Wait <= 0 {
		return 10 * time.Second
	}
	return c.Wait
}

// OrderID is the order id of a reference in a store: UUIDv5 of the store id
// and the reference, so two creates with one reference meet in one
// partition of pod.order.commands and one decider rejects the second.
func OrderID(store uuid.UUID, reference string) uuid.UUID {
	return uuid.NewSHA1(store, []byte(reference))
}

// Create validates, prices and decides one order. A command id passed in
// (derived from a batch item or an Idempotency-Key) may have been decided
// already: its decision is looked up first, and when found it is the
// answer, whatever the catalog or the soft duplicate claims say now (the
// first decision stands: an order it created exists and will be pushed).
// A fresh id cannot have been decided, so it costs no lookup.
func (c *Creator) Create(ctx context.Context, in CreateInput) (Created, error) {
	cmdID, fresh := in.CommandID, in.CommandID == uuid.Nil
	if fresh {
		cmdID = uuid.New()
	} else {
		dec, ok, err := LoadDecision(ctx, c.Bus.Pool, cmdID)
		if err != nil && in.MaybeSent {
			// Whether the earlier attempt's command is on the log is not
			// known: not a failure of this create to report as its answer.
			return Created{}, fmt.Errorf("%w: %v", ErrLogUnread, err)
		}
		if err != nil {
			return Created{}, err
		}
		if ok {
			return c.decided(ctx, in, dec)
		}
		if in.Sent {
			dec, err := c.Bus.Await(ctx, cmdID, c.wait())
			if err != nil {
				return Created{}, err
			}
			return c.decided(ctx, in, dec)
		}
		if in.MaybeSent {
			dec, ok, err := c.Bus.DecisionOnceRead(ctx, cmdID, in.LogEnd, c.wait())
			if err != nil {
				return Created{}, err
			}
			if ok {
				return c.decided(ctx, in, dec)
			}
		}
	}
	draft, orderID, err := c.draft(ctx, in)
	if err != nil {
		return Created{}, err
	}

	dup, release, err := c.softDuplicate(ctx, draft, orderID, cmdID)
	if err != nil {
		return Created{}, err
	}
	details, err := detailsOf(draft, in.Via, orderID, dup)
	if err != nil {
		return Created{}, err
	}
	cmd := Command{ID: cmdID, Kind: KindCreate, OrderID: orderID, AccountID: in.AccountID,
		ReferenceID: draft.ReferenceID, StoreID: draft.StoreID, Details: &details}
	if in.BeforeSend != nil {
		in.BeforeSend(orderID)
	}
	dec, err := c.Bus.DecideNew(ctx, cmd, c.wait())
	if err != nil {
		// A command on the log (undecided), or whose send failed other
		// than by a refusal (the broker may have appended it all the
		// same), keeps the content's claim: should it be decided, a
		// second create of the same content is its duplicate.
		if !errors.Is(err, ErrUndecided) && (!errors.Is(err, ErrCommandLog) || Refused(err)) {
			release()
		}
		return Created{}, err
	}
	if !dec.Accepted() {
		release()
		return Created{}, rejected(dec, draft.ReferenceID)
	}
	return Created{Decision: dec, Draft: draft, OrderID: orderID, Details: details}, nil
}

// draft validates and prices the request against the catalog and names
// its order.
func (c *Creator) draft(ctx context.Context, in CreateInput) (Draft, uuid.UUID, error) {
	req, err := DecodeCreate(in.Body)
	if err != nil {
		return Draft{}, uuid.Nil, err
	}
	variants, err := c.Catalog.Variants(ctx, in.AccountID, req.VariantIDs())
	if err != nil {
		return Draft{}, uuid.Nil, err
	}
	rates, err := c.Catalog.Rates(ctx)
	if err != nil {
		return Draft{}, uuid.Nil, err
	}
	draft, err := Validate(req, variants, rates)
	if err != nil {
		return Draft{}, uuid.Nil, err
	}
	if draft.ReferenceID == "" {
		draft.ReferenceID = in.DefaultReference
		if draft.ReferenceID == "" {
			draft.ReferenceID = "pod-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:20]
		}
	}
	orderID := OrderID(draft.StoreID, draft.ReferenceID)
	for i := range draft.Lines {
		draft.Lines[i].LineItemID = uuid.NewSHA1(orderID, fmt.Appendf(nil, "line/%d", i))
	}
	return draft, orderID, nil
}

// decided answers a create whose command was decided before (a batch item
// or a keyed request worked again) from that decision: the order it
// created (a Repeat, which the caller answers from the read model, never
// from the request as read today), or the refusal it met.
func (c *Creator) decided(ctx context.Context, in CreateInput, dec Decision) (Created, error) {
	if dec.Accepted() {
		return Created{Decision: dec, OrderID: dec.OrderID, Repeat: true}, nil
	}
	var reference string
	if dec.Code == schemas.CodeDuplicateReference {
		st, _, err := LoadState(ctx, c.Bus.Pool, in.AccountID, dec.OrderID)
		if err != nil {
			return Created{}, err
		}
		reference = st.Order.ReferenceID
	}
	return Created{}, rejected(dec, reference)
}

// rejected is the error of a refused create of reference.
func rejected(dec Decision, reference string) error {
	msg := dec.Message
	if dec.Code == schemas.CodeDuplicateReference && reference != "" {
		msg = fmt.Sprintf("an order with reference_id %q already exists in this store", reference)
	}
	return &Rejected{Code: dec.Code, Message: msg}
}

func detailsOf(d Draft, via string, orderID uuid.UUID, duplicate bool) (schemas.OrderDetails, error) {
	customer, err := codec.Marshal(d.Customer)
	if err != nil {
		return schemas.OrderDetails{}, err
	}
	address := json.RawMessage("null")
	if d.ShippingAddress != nil {
		if address, err = codec.Marshal(d.ShippingAddress); err != nil {
			return schemas.OrderDetails{}, err
		}
	}
	lines, err := codec.Marshal(d.Lines)
	if err != nil {
		return schemas.OrderDetails{}, err
	}
	pricing, err := codec.Marshal(d.Pricing)
	if err != nil {
		return schemas.OrderDetails{}, err
	}
	if via == "" {
		via = "api"
	}
	return schemas.OrderDetails{CreatedVia: via, Duplicate: duplicate, IdempotencyKey: uuid.NewSHA1(orderID, []byte("push")),
		Customer: customer, ShippingAddress: address, LabelLink: d.LabelLink, TrackingNumber: d.TrackingNumber,
		ShippingService: d.ShippingService, AddonService: d.AddonService, Note: d.Note, Tags: d.Tags,
		Lines: lines, Pricing: pricing}, nil
}

// softDuplicate claims the draft's content hash for orderID in Redis for
// 24 hours (forced orders claim it too, when it is free). When another
// order holds it, that order is a soft duplicate: an error without force,
// duplicate=true with it. A holder that is still undecided is waited for;
// a holder whose create was rejected, or that stays undecided for a minute
// (its command never reached the log), gives up its claim. The returned
// release gives the claim back when this create does not happen. Redis
// being away skips the check (the reference_id rule still holds): a soft
// check must not stop intake.
func (c *Creator) softDuplicate(ctx context.Context, d Draft, orderID, cmdID uuid.UUID) (bool, func(), error) {
	noop := func() {}
	if c.Redis == nil {
		return false, noop, nil
	}
	key := c.Prefix + "dup:" + d.StoreID.String() + ":" + d.ContentHash
	mine := fmt.Sprintf("%s|%s|%d", orderID, cmdID, time.Now().Unix())
	for range 3 {
		ok, err := c.Redis.SetNX(ctx, key, mine, SoftDuplicateWindow).Result()
		if err != nil {
			c.Log.WarnContext(ctx, "soft duplicate check skipped: redis unavailable", "err", err)
			return false, noop, nil
		}
		if ok {
			return false, func() { c.releaseClaim(key, mine) }, nil
		}
		held, err := c.Redis.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired in between: claim again
		}
		if err != nil {
			c.Log.WarnContext(ctx, "soft duplicate check skipped: redis unavailable", "err", err)
			return false, noop, nil
		}
		parts := strings.Split(held, "|")
		if len(parts) == 3 && parts[0] == orderID.String() {
			// The same reference again: the decider answers (409
			// DUPLICATE_REFERENCE_ID, or the first decision of a repeat).
			return false, noop, nil
		}
		var other, otherCmd uuid.UUID
		var since int64
		if len(parts) == 3 {
			other, err = uuid.Parse(parts[0])
			if err == nil {
				otherCmd, err = uuid.Parse(parts[1])
			}
			if err == nil {
				since, err = strconv.ParseInt(parts[2], 10, 64)
			}
		}
		if len(parts) != 3 || err != nil {
			c.releaseClaim(key, held)
			continue
		}
		dec, err := c.Bus.Await(ctx, otherCmd, c.wait())
		switch {
		case err == nil && dec.Accepted():
			if d.Force {
				return true, noop, nil
			}
			return false, noop, &DuplicateOrderError{OrderID: other}
		case err == nil:
			c.releaseClaim(key, held) // the holder was refused: take its place
		case errors.Is(err, ErrUndecided) && time.Since(time.Unix(since, 0)) > time.Minute:
			// Undecided this long, its command may never have been sent,
			// or wait on the log for a decider far behind (found by
			// review: that let the duplicate through). Its place is taken
			// only once the decider has read the log as far as it is now
			// without finding the command there.
			dec, found, err := c.Bus.DecisionOnceRead(ctx, otherCmd, nil, c.wait())
			switch {
			case err != nil:
				return false, noop, fmt.Errorf("%w (order %s)", ErrClaimUndecided, other)
			case found && dec.Accepted():
				if d.Force {
					return true, noop, nil
				}
				return false, noop, &DuplicateOrderError{OrderID: other}
			}
			c.releaseClaim(key, held) // refused, or never sent: take its place
		case errors.Is(err, ErrUndecided):
			// The other order's command is undecided, not this one's,
			// which is not sent: a retry is a new attempt.
			return false, noop, fmt.Errorf("%w (order %s)", ErrClaimUndecided, other)
		default:
			return false, noop, err
		}
	}
	return false, noop, nil
}

func (c *Creator) releaseClaim(key, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := rdb.DeleteIfHolds(ctx, c.Redis, key, value); err != nil {
		c.Log.Warn("releasing soft duplicate claim failed", "err", err)
	}
}
