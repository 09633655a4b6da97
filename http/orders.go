package http

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/pgnotify"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
)

// Orders is what the order endpoints need.
type Orders struct {
	Creator *order.Creator
	Bus     *order.Bus
	Queries orderrm.Queries
	Notify  *pgnotify.Listener // channels order.NotifyDecided and orderrm.NotifyProjected
	// Wait bounds the wait for a decision and for the read model; default 10s.
	Wait time.Duration
}

func (o *Orders) wait() time.Duration {
	if o.Wait <= 0 {
		return 10 * time.Second
	}
	return o.Wait
}

// create answers one create-order body: the status and the value to send.
// Both the POST handler and the batch worker use it, so a batch item's
// result is exactly what a single create would have answered.
func (o *Orders) create(ctx context.Context, in order.CreateInput) (int, any) {
	created, proj, projected, err := o.createProjected(ctx, in)
	if err != nil {
		e := orderError(err)
		return e.Status(), e
	}
	if !projected {
		// The order exists (decided and durable); only the read model lags.
		if created.Repeat {
			// Decided before: the request read today may price it other
			// than the order was; only the read model tells it right (as
			// below, never the draft).
			e := catchingUp()
			return e.Status(), e
		}
		return fiber.StatusCreated, o.createdFromDraft(ctx, in.AccountID, created)
	}
	if proj.Created != nil && proj.Entry != nil && !created.Repeat {
		// The projector announced the new row: answer from it.
		res := draftOrder(created)
		res.CreatedAt, res.UpdatedAt = *proj.Created, *proj.Created
		place := int(*proj.Entry)
		res.QueuePosition = &place
		return fiber.StatusCreated, res
	}
	res, err := o.Queries.Entered(ctx, in.AccountID, created.OrderID)
	if err != nil {
		if created.Repeat {
			e := catchingUp()
			return e.Status(), e
		}
		return fiber.StatusCreated, o.createdFromDraft(ctx, in.AccountID, created)
	}
	if created.Repeat {
		// Decided before, maybe long ago: the order as it is now, not as
		// the decision left it (a PENDING with a queue position for an
		// order pushed since).
		return fiber.StatusCreated, res
	}
	if res, err = o.Queries.WithStatus(ctx, res, created.Decision.Status); err != nil {
		e := toAPIError(err)
		return e.Status(), e
	}
	return fiber.StatusCreated, res
}

// createProjected creates an order and waits (bounded) for the read model
// to hold it; projected reports whether it does, and proj is what the
// projector announced of it (zero when the wait ended on a lookup). The
// subscription to the announcement is made before the command is sent, so
// the wait needs no first look at the table.
func (o *Orders) createProjected(ctx context.Context, in order.CreateInput) (created order.Created, proj orderrm.Projected, projected bool, err error) {
	var sub <-chan string
	stop := func() {}
	defer func() { stop() }()
	in.BeforeSend = func(id uuid.UUID) { sub, stop = o.Notify.Subscribe(orderrm.NotifyProjected, id.String()) }
	if created, err = o.Creator.Create(ctx, in); err != nil {
		return order.Created{}, orderrm.Projected{}, false, err
	}
	a := o.projection(created.OrderID, created.Decision.Version)
	if sub == nil {
		proj, err = pgnotify.Await(ctx, o.Notify, orderrm.NotifyProjected, created.OrderID.String(), o.wait(), a)
	} else {
		proj, err = pgnotify.AwaitSubscribed(ctx, sub, o.wait(), a)
	}
	return created, proj, err == nil, nil
}

// projection is how a request learns that the read model holds version of
// the order id: from the projector's announcement (with what it announced),
// else from the row's version.
func (o *Orders) projection(id uuid.UUID, version int) pgnotify.Announcement[orderrm.Projected] {
	return pgnotify.Announcement[orderrm.Projected]{
		Parse: func(v string) (orderrm.Projected, bool) {
			p, ok := orderrm.ParseProjected(v)
			return p, ok && p.Version >= version
		},
		Load: func(ctx context.Context) (orderrm.Projected, bool, error) {
			n, err := o.Queries.Version(ctx, id)
			return orderrm.Projected{}, n >= version, err
		},
	}
}

// draftOrder is the 201 body of a create as its draft and decision tell
// it; the caller adds the times and the queue place.
func draftOrder(c order.Created) orderrm.Order {
	d := c.Draft
	addons := d.AddonService
	if addons == nil {
		addons = []string{}
	}
	return orderrm.Order{OrderID: c.OrderID, ReferenceID: d.ReferenceID, StoreID: d.StoreID, Status: schemas.StatusPending,
		Duplicate: c.Details.Duplicate, AddonService: addons, Pricing: c.Details.Pricing, CreatedVia: c.Details.CreatedVia}
}

// createdFromDraft is the 201 body built without the read model (when it
// lags): timestamps come from the decider's state.
func (o *Orders) createdFromDraft(ctx context.Context, account uuid.UUID, c order.Created) orderrm.Order {
	res := draftOrder(c)
	if st, ok, err := order.LoadState(ctx, o.Bus.Pool, account, c.OrderID); err == nil && ok {
		res.CreatedAt, res.UpdatedAt = st.Order.CreatedAt, st.Order.CreatedAt
	}
	return res
}

// orderError maps an order command failure to its API error.
func orderError(err error) *Error {
	var fe *order.FieldError
	var dup *order.DuplicateOrderError
	var rej *order.Rejected
	var big *order.TooLargeError
	switch {
	case errors.As(err, &big):
		return &Error{Code: schemas.CodePayloadTooLarge, Message: big.Error()}
	case errors.As(err, &fe):
		return Validation(fe.Field, fe.Message)
	case errors.As(err, &dup):
		return &Error{Code: schemas.CodeDuplicateOrder, Message: dup.Error(),
			Details: map[string]any{"order_id": dup.OrderID}}
	case errors.As(err, &rej):
		if rej.Code == schemas.CodeNotFound {
			return NotFound("order")
		}
		return &Error{Code: rej.Code, Message: rej.Message}
	case errors.Is(err, order.ErrCommandLog):
		return Unavailable("the order log (Kafka)")
	case errors.Is(err, order.ErrUndecided):
		return Undecided(", or look the order up,")
	case errors.Is(err, order.ErrLogUnread):
		return NotYet("an earlier attempt of this request may be on the order log, which is not read that far yet")
	case errors.Is(err, order.ErrClaimUndecided):
		return NotYet("an order of the same content, created moments ago, is not decided yet, so whether this one is its duplicate is not known")
	}
	return toAPIError(err)
}

// awaitProjection waits until the read model holds version of the order.
func (o *Orders) awaitProjection(ctx context.Context, id uuid.UUID, version int) error {
	_, err := pgnotify.Await(ctx, o.Notify, orderrm.NotifyProjected, id.String(), o.wait(), o.projection(id, version))
	return err
}

// commandID is the id of the command a request sends: derived from its
// Idempotency-Key's seed when it has one (a POST; see commandSeed), so a
// repeat after an undecided 503 waits for the same command instead of
// sending a second one.
func commandID(c *fiber.Ctx, what string) uuid.UUID {
	seed, ok := c.Locals(localSeed).(uuid.UUID)
	if !ok {
		return uuid.New()
	}
	return uuid.NewSHA1(seed, []byte(what))
}

func (o *Orders) postOrder(c *fiber.Ctx) error {
	in := order.CreateInput{AccountID: accountOf(c), Body: c.Body(), Via: "api"}
	if _, keyed := c.Locals(localSeed).(uuid.UUID); keyed {
		in.CommandID = commandID(c, "create")
		in.Sent, _ = c.Locals(localSent).(bool)
		repeat, _ := c.Locals(localRepeat).(bool)
		in.MaybeSent = repeat && !in.Sent
		in.DefaultReference = "idem-" + in.CommandID.String()
	}
	status, body := o.create(c.UserContext(), in)
	if e, ok := body.(*Error); ok {
		return e
	}
	return c.Status(status).JSON(body)
}

func (o *Orders) listOrders(c *fiber.Ctx) error {
	limit, err := parseLimit(c)
	if err != nil {
		return err
	}
	f := orderrm.Filter{Status: c.Query("status"), Limit: limit}
	if f.Status != "" && !slices.Contains(schemas.OrderStatuses, f.Status) {
		return Validation("status", "status must be one of PENDING, PROCESSING, SUCCESS, SYNCED, FULFILLED, FAILED, CANCELLED")
	}
	for _, p := range []struct {
		name string
		dst  **time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		raw := c.Query(p.name)
		if raw == "" {
			continue
		}
		// A "+01:00" offset sent unescaped arrives as " 01:00" (a query's
		// "+" is a space); a date-time holds no space, so it reads back.
		t, err := time.Parse(time.RFC3339Nano, strings.ReplaceAll(raw, " ", "+"))
		if err != nil {
			return Validation(p.name, p.name+" must be an ISO 8601 date-time such as 2026-01-31T00:00:00Z")
		}
		*p.dst = &t
	}
	var after orderrm.Key
	has, err := parseCursor(c, &after)
	if err != nil {
		return err
	}
	if has {
		f.After = &after
	}
	orders, more, err := o.Queries.List(c.UserContext(), accountOf(c), f)
	if err != nil {
		return err
	}
	return c.JSON(page(orders, more, func(x orderrm.Order) any { return orderrm.Key{CreatedAt: x.CreatedAt, ID: x.OrderID} }))
}

func (o *Orders) getOrder(c *fiber.Ctx) error {
	id, err := pathUUID(c, "order_id")
	if err != nil {
		return err
	}
	d, err := o.Queries.Detail(c.UserContext(), accountOf(c), id)
	if errors.Is(err, orderrm.ErrNotFound) {
		return o.notProjected(c, id)
	}
	if err != nil {
		return err
	}
	return c.JSON(d)
}

func (o *Orders) getQueue(c *fiber.Ctx) error {
	id, err := pathUUID(c, "order_id")
	if err != nil {
		return err
	}
	r, err := o.Queries.Queue(c.UserContext(), accountOf(c), id)
	if errors.Is(err, orderrm.ErrNotFound) {
		return o.notProjected(c, id)
	}
	if err != nil {
		return err
	}
	return c.JSON(r)
}

// notProjected answers for an order the read model lacks: 404, unless the
// decider has it (the read model lags, or is being rebuilt): then 503 with
// Retry-After, never a false "not found" after a 201.
func (o *Orders) notProjected(c *fiber.Ctx, id uuid.UUID) error {
	if _, known, err := order.LoadState(c.UserContext(), o.Bus.Pool, accountOf(c), id); err == nil && known {
		return catchingUp()
	}
	return NotFound("order")
}

// catchingUp answers for an order that exists while the read model does
// not hold it yet.
func catchingUp() *Error {
	return &Error{Code: schemas.CodeServiceUnavailable, RetryAfter: 1,
		Message: "the order exists but its read model is catching up; try again shortly"}
}

// command answers retry and cancel: the decider decides, the response
// shows the order as the decision left it.
func (o *Orders) command(kind string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		id, err := pathUUID(c, "order_id")
		if err != nil {
			return err
		}
		ctx, account := c.UserContext(), accountOf(c)
		// Ids the account does not have are answered here, so they never
		// reach the log (the decider would answer the same 404).
		if _, known, err := order.LoadState(ctx, o.Bus.Pool, account, id); err == nil && !known {
			return NotFound("order")
		}
		dec, err := o.Bus.Decide(ctx, order.Command{ID: commandID(c, kind+"/"+id.String()), Kind: kind, OrderID: id, AccountID: account}, o.wait())
		if err != nil {
			return orderError(err)
		}
		if !dec.Accepted() {
			return orderError(&order.Rejected{Code: dec.Code, Message: dec.Message})
		}
		// Applied: answer it even when the read model lags (then from the
		// row as last projected, with the decision's status; 503 when it
		// has no row yet: never a failure for a command that was applied).
		_ = o.awaitProjection(ctx, id, dec.Version)
		res, err := o.Queries.Get(ctx, account, id)
		if errors.Is(err, orderrm.ErrNotFound) {
			return catchingUp()
		}
		if err != nil {
			return err
		}
		if res, err = o.Queries.WithStatus(ctx, res, dec.Status); err != nil {
			return err
		}
		return c.JSON(res)
	}
}
