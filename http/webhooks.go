package http

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/webhook"
	"github.com/printpod/pod/delivery"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/secretbox"
	deliveryrm "github.com/printpod/pod/projections/delivery"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Webhooks is what the webhook endpoints need.
type Webhooks struct {
	Pool       *pgxpool.Pool
	Bus        *webhook.Bus
	Box        *secretbox.Box
	Guard      *delivery.Guard
	Streaks    *delivery.Streaks
	Deliveries deliveryrm.Queries
	Producer   *kgo.Client
	Log        *slog.Logger
	Naming     schemas.Naming // topic names on the cluster
	// Wait bounds the wait for a decision; default 10s.
	Wait time.Duration
}

func (w *Webhooks) wait() time.Duration {
	if w.Wait <= 0 {
		return 10 * time.Second
	}
	return w.Wait
}

func (w *Webhooks) routes(r fiber.Router, post fiber.Handler) {
	r.Get("/me/webhooks/topics", w.topics)
	r.Get("/me/webhooks", w.list)
	r.Post("/me/webhooks", post, w.create)
	r.Get("/me/webhooks/:id", w.get)
	r.Patch("/me/webhooks/:id", post, w.patch)
	r.Delete("/me/webhooks/:id", w.delete)
	r.Post("/me/webhooks/:id/rotate-secret", post, w.rotate)
	r.Post("/me/webhooks/:id/test", post, w.test)
	r.Get("/me/webhooks/:id/deliveries", w.deliveries)
	r.Get("/me/webhooks/:id/deliveries/:delivery_id", w.getDelivery)
	r.Post("/me/webhooks/:id/deliveries/:delivery_id/resend", post, w.resend)
}

// webhookView is the interface's Webhook shape; Secret only on creation
// and rotation.
type webhookView struct {
	ID                  uuid.UUID `json:"id"`
	URL                 string    `json:"url"`
	Description         *string   `json:"description"`
	Topics              []string  `json:"topics"`
	IsActive            bool      `json:"is_active"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	DisabledReason      *string   `json:"disabled_reason"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
	Secret              string    `json:"secret,omitempty"`
}

// views shapes webhooks, reading their failure streaks from Redis; without
// Redis the streak shows as 0 (it is not counted then either).
func (w *Webhooks) views(ctx context.Context, hooks []*webhook.Webhook) []webhookView {
	ids := make([]uuid.UUID, len(hooks))
	gens := make([]int, len(hooks))
	for i, h := range hooks {
		ids[i], gens[i] = h.ID, h.Gen
	}
	counts, err := w.Streaks.Counts(ctx, ids, gens)
	if err != nil {
		w.Log.WarnContext(ctx, "failure streaks unavailable (Redis)", "err", err)
	}
	out := make([]webhookView, len(hooks))
	for i, h := range hooks {
		out[i] = webhookView{ID: h.ID, URL: h.URL, Description: h.Description, Topics: h.Topics, IsActive: h.IsActive,
			ConsecutiveFailures: counts[i], DisabledReason: h.DisabledReason, CreatedAt: h.CreatedAt, UpdatedAt: h.UpdatedAt}
	}
	return out
}

func (w *Webhooks) view(ctx context.Context, h *webhook.Webhook) webhookView {
	return w.views(ctx, []*webhook.Webhook{h})[0]
}

func (w *Webhooks) topics(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"data": schemas.WebhookTopics})
}

// load finds the caller's webhook or answers 404.
func (w *Webhooks) load(c *fiber.Ctx) (*webhook.Webhook, error) {
	id, err := pathUUID(c, "id")
	if err != nil {
		return nil, err
	}
	h, err := webhook.Load(c.UserContext(), w.Pool, accountOf(c), id)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, NotFound("webhook")
	}
	return h, nil
}

func (w *Webhooks) list(c *fiber.Ctx) error {
	limit, err := parseLimit(c)
	if err != nil {
		return err
	}
	var pos deliveryrm.Position
	has, err := parseCursor(c, &pos)
	if err != nil {
		return err
	}
	var after *time.Time
	if has {
		after = &pos.CreatedAt
	}
	hooks, err := webhook.List(c.UserContext(), w.Pool, accountOf(c), after, pos.ID, limit+1)
	if err != nil {
		return err
	}
	more := len(hooks) > limit
	if more {
		hooks = hooks[:limit]
	}
	return c.JSON(page(w.views(c.UserContext(), hooks), more, func(v webhookView) any {
		return deliveryrm.Position{CreatedAt: v.CreatedAt, ID: v.ID}
	}))
}

func (w *Webhooks) get(c *fiber.Ctx) error {
	h, err := w.load(c)
	if err != nil {
		return err
	}
	return c.JSON(w.view(c.UserContext(), h))
}

// decodeWebhookBody decodes a create or patch body on the command side,
// with the SSRF guard checking the url, and maps a refusal to its API error.
func (w *Webhooks) decodeWebhookBody(raw []byte, patch bool) (webhook.Body, error) {
	b, err := webhook.DecodeBody(raw, patch, w.Guard.CheckURL)
	var be *webhook.BodyError
	if errors.As(err, &be) {
		e := &Error{Code: be.Code, Message: be.Message}
		if be.Field != "" {
			e.Details = map[string]any{"field": be.Field}
		}
		return b, e
	}
	return b, err
}

// decide sends a webhook command and maps a refusal to its API error.
func (w *Webhooks) decide(ctx context.Context, cmd webhook.Command) (webhook.Decision, error) {
	dec, err := w.Bus.Decide(ctx, cmd, w.wait())
	switch {
	case errors.Is(err, webhook.ErrCommandLog):
		return dec, Unavailable("the webhook command log (Kafka)")
	case errors.Is(err, webhook.ErrUndecided):
		return dec, Undecided("")
	case err != nil:
		return dec, err
	}
	switch dec.Code {
	case "":
		return dec, nil
	case schemas.CodeNotFound:
		return dec, NotFound("webhook")
	}
	return dec, &Error{Code: dec.Code, Message: dec.Message}
}

// withSecret loads the webhook after a decision and opens its current
// secret (the stored one: a command repeated after an undecided 503
// answers the secret it set). A secret is shown only within the
// Idempotency-Key window of its decision: a repeat later gets the webhook
// without it.
func (w *Webhooks) withSecret(c *fiber.Ctx, id uuid.UUID, dec webhook.Decision) (webhookView, error) {
	h, err := webhook.Load(c.UserContext(), w.Pool, accountOf(c), id)
	if err != nil {
		return webhookView{}, err
	}
	if h == nil {
		return webhookView{}, NotFound("webhook")
	}
	v := w.view(c.UserContext(), h)
	if time.Since(dec.DecidedAt) > IdempotencyWindow {
		return v, nil
	}
	secret, err := w.Box.Open(h.Secret)
	if err != nil {
		return webhookView{}, fmt.Errorf("open webhook secret: %w", err)
	}
	v.Secret = secret
	return v, nil
}

// newSealedSecret makes a signing secret and seals it for the command.
func (w *Webhooks) newSealedSecret() (string, error) {
	secret, err := delivery.NewSecret()
	if err != nil {
		return "", err
	}
	return w.Box.Seal(secret)
}

func (w *Webhooks) create(c *fiber.Ctx) error {
	b, err := w.decodeWebhookBody(c.Body(), false)
	if err != nil {
		return err
	}
	sealed, err := w.newSealedSecret()
	if err != nil {
		return err
	}
	cmdID := commandID(c, "webhook-create")
	cmd := webhook.Command{ID: cmdID, Kind: webhook.KindCreate, AccountID: accountOf(c), WebhookID: uuid.NewSHA1(cmdID, []byte("webhook")),
		URL: b.URL, Topics: b.Topics, Description: b.Description, Secret: sealed}
	dec, err := w.decide(c.UserContext(), cmd)
	if err != nil {
		return err
	}
	v, err := w.withSecret(c, cmd.WebhookID, dec)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(v)
}

func (w *Webhooks) patch(c *fiber.Ctx) error {
	h, err := w.load(c)
	if err != nil {
		return err
	}
	b, err := w.decodeWebhookBody(c.Body(), true)
	if err != nil {
		return err
	}
	cmd := webhook.Command{ID: commandID(c, "webhook-patch"), Kind: webhook.KindUpdate, AccountID: h.AccountID, WebhookID: h.ID,
		URL: b.URL, Topics: b.Topics, Description: b.Description, SetDescription: b.SetDescription, IsActive: b.IsActive}
	if _, err := w.decide(c.UserContext(), cmd); err != nil {
		return err
	}
	after, err := webhook.Load(c.UserContext(), w.Pool, h.AccountID, h.ID)
	if err != nil {
		return err
	}
	if after == nil {
		return NotFound("webhook")
	}
	if b.IsActive != nil && *b.IsActive && h.IsActive {
		// Already active: is_active true still resets the counter.
		w.Streaks.Reset(c.UserContext(), after.ID, after.Gen)
	}
	return c.JSON(w.view(c.UserContext(), after))
}

func (w *Webhooks) delete(c *fiber.Ctx) error {
	h, err := w.load(c)
	if err != nil {
		return err
	}
	if _, err := w.decide(c.UserContext(), webhook.Command{ID: commandID(c, "webhook-delete"), Kind: webhook.KindDelete,
		AccountID: h.AccountID, WebhookID: h.ID}); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

func (w *Webhooks) rotate(c *fiber.Ctx) error {
	h, err := w.load(c)
	if err != nil {
		return err
	}
	sealed, err := w.newSealedSecret()
	if err != nil {
		return err
	}
	dec, err := w.decide(c.UserContext(), webhook.Command{ID: commandID(c, "webhook-rotate"), Kind: webhook.KindRotate,
		AccountID: h.AccountID, WebhookID: h.ID, Secret: sealed})
	if err != nil {
		return err
	}
	v, err := w.withSecret(c, h.ID, dec)
	if err != nil {
		return err
	}
	return c.JSON(v)
}

func inactive() *Error {
	return &Error{Code: schemas.CodeWebhookInactive,
		Message: "the webhook is inactive; re-activate it with PATCH {\"is_active\": true} first"}
}

// produceTask puts t on the deliveries topic: the delivery is made once
// it is there, whatever happens to the request after. When it cannot be
// put there nothing was written, and the answer is 503.
func (w *Webhooks) produceTask(ctx context.Context, t schemas.DeliveryTask) error {
	kr, err := delivery.TaskRecord(w.Naming.Topic(schemas.TopicWebhookDeliveries), t)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Producer.ProduceSync(pctx, kr).FirstErr(); err != nil {
		return Unavailable("the delivery log (Kafka)")
	}
	return nil
}

func (w *Webhooks) test(c *fiber.Ctx) error {
	h, err := w.load(c)
	if err != nil {
		return err
	}
	if !h.IsActive {
		return inactive()
	}
	now := time.Now().UTC()
	ev, err := schemas.NewEventWithID(commandID(c, "webhook-test"), schemas.TypeWebhookTest, now, map[string]any{
		"message": "This is a test delivery from the print-on-demand service.", "webhook_id": h.ID})
	if err != nil {
		return err
	}
	payload, err := codec.Marshal(ev)
	if err != nil {
		return err
	}
	task := schemas.DeliveryTask{DeliveryID: delivery.DeliveryID(h.ID, ev.ID), WebhookID: h.ID, AccountID: h.AccountID,
		EventID: ev.ID, Topic: ev.Type, Gen: h.Gen, Run: 1, Attempt: 1, DueAt: now, CreatedAt: now, Payload: payload}
	if err := w.produceTask(c.UserContext(), task); err != nil {
		return err
	}
	// Recorded ahead of the delivery log, so it is listed as soon as the
	// request is answered.
	rec, err := w.Deliveries.Created(c.UserContext(), task)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusAccepted).JSON(rec)
}

var deliveryStatuses = []string{schemas.DeliveryPending, schemas.DeliverySuccess, schemas.DeliveryFailed, schemas.DeliveryCancelled}

func (w *Webhooks) deliveries(c *fiber.Ctx) error {
	h, err := w.load(c)
	if err != nil {
		return err
	}
	limit, err := parseLimit(c)
	if err != nil {
		return err
	}
	status := c.Query("status")
	if status != "" && !slices.Contains(deliveryStatuses, status) {
		return Validation("status", "status must be one of "+strings.Join(deliveryStatuses, ", "))
	}
	var pos deliveryrm.Position
	has, err := parseCursor(c, &pos)
	if err != nil {
		return err
	}
	var after *deliveryrm.Position
	if has {
		after = &pos
	}
	recs, resume, err := w.Deliveries.List(c.UserContext(), h.AccountID, h.ID, status, after, limit+1)
	if err != nil {
		return err
	}
	more := len(recs) > limit
	if more {
		recs = recs[:limit]
	}
	p := page(recs, more, func(r deliveryrm.Record) any { return deliveryrm.Position{CreatedAt: r.CreatedAt, ID: r.ID} })
	if !more && resume != nil {
		// A filtered page that looked through as many deliveries as one
		// may: the next goes on from the last it looked at.
		p.NextCursor = encodeCursor(*resume)
	}
	return c.JSON(p)
}

func (w *Webhooks) loadDelivery(c *fiber.Ctx) (*webhook.Webhook, deliveryrm.Record, error) {
	// Both path ids are read, in their order, before either is looked up:
	// a malformed one is a 400 whatever the other names.
	if _, err := pathUUID(c, "id"); err != nil {
		return nil, deliveryrm.Record{}, err
	}
	id, err := pathUUID(c, "delivery_id")
	if err != nil {
		return nil, deliveryrm.Record{}, err
	}
	h, err := w.load(c)
	if err != nil {
		return nil, deliveryrm.Record{}, err
	}
	rec, ok, err := w.Deliveries.Get(c.UserContext(), h.AccountID, h.ID, id)
	if err != nil {
		return nil, rec, err
	}
	if !ok {
		return nil, rec, NotFound("delivery")
	}
	return h, rec, nil
}

func (w *Webhooks) getDelivery(c *fiber.Ctx) error {
	_, rec, err := w.loadDelivery(c)
	if err != nil {
		return err
	}
	return c.JSON(rec)
}

// resend starts a new run of a failed or cancelled delivery: the same
// delivery and event id, up to 7 more attempts. The new run's task is put
// on the log first, then the row is marked pending for it so a second
// resend is refused; two resends racing past that check put the same task
// (same delivery, run and attempt) on the log, which the sender attempts
// once, and both are answered 202.
func (w *Webhooks) resend(c *fiber.Ctx) error {
	h, rec, err := w.loadDelivery(c)
	if err != nil {
		return err
	}
	if rec.Status != schemas.DeliveryFailed && rec.Status != schemas.DeliveryCancelled {
		return &Error{Code: schemas.CodeInvalidDeliveryState,
			Message: fmt.Sprintf("only a failed or cancelled delivery can be resent; this one is %s", rec.Status)}
	}
	if !h.IsActive {
		return inactive()
	}
	if len(rec.Payload) == 0 || string(rec.Payload) == "null" {
		return Unavailable("this delivery's payload (still being recorded)")
	}
	ctx := c.UserContext()
	now := time.Now().UTC()
	if err := w.produceTask(ctx, schemas.DeliveryTask{DeliveryID: rec.ID, WebhookID: h.ID,
		AccountID: h.AccountID, EventID: rec.EventID, Topic: rec.Topic, Gen: h.Gen, Run: rec.Run + 1, Attempt: 1,
		DueAt: now, CreatedAt: rec.CreatedAt, Payload: rec.Payload}); err != nil {
		return err
	}
	pending, ok, err := w.Deliveries.Requeued(ctx, rec, rec.Run+1, h.Gen, now)
	if err != nil {
		return err
	}
	if !ok {
		// A racing resend, or the delivery log, moved the row to the new
		// run first: the answer is the row as it is now.
		if pending, ok, err = w.Deliveries.Get(ctx, h.AccountID, h.ID, rec.ID); err != nil {
			return err
		}
		if !ok {
			return NotFound("delivery")
		}
	}
	return c.Status(fiber.StatusAccepted).JSON(pending)
}
