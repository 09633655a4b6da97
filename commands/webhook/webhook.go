// Package webhook is the webhook decider: it owns every webhook's state and
// the per-client limit. Commands are keyed by client (account) id, so one
// decider sees all commands of a client in order, and the limit of 5 holds
// under any number of concurrent creates.
package webhook

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/schemas"
)

// MaxPerClient is how many webhooks a client may have.
const MaxPerClient = 5

// ReasonTooManyFailures is the disabled_reason of an auto-disabled webhook.
const ReasonTooManyFailures = "too_many_failures"

// RotationOverlap is how long the previous secret keeps signing (as a
// second Standard Webhooks signature) after a rotation.
const RotationOverlap = 24 * time.Hour

// Command kinds.
const (
	KindCreate  = "create"
	KindUpdate  = "update"
	KindDelete  = "delete"
	KindRotate  = "rotate_secret"
	KindDisable = "disable" // automatic, after too many failed deliveries
	// KindReseal seals a webhook's secrets again with the first key of the
	// ring (podctl webhooks reseal). It is a compare-and-set: a secret is
	// replaced only while the stored sealed value is still the one the
	// command names. Clients see nothing of it: no event, no updated_at.
	KindReseal = "reseal"
)

// Errors of Decide; the API maps them to codes.
var (
	ErrNotFound     = errors.New("webhook not found")
	ErrLimitReached = fmt.Errorf("client already has %d webhooks", MaxPerClient)
)

// Command is one webhook command on pod.webhook.commands.
type Command struct {
	ID        uuid.UUID `json:"id"`
	Kind      string    `json:"kind"`
	AccountID uuid.UUID `json:"account_id"`
	WebhookID uuid.UUID `json:"webhook_id"`
	// create and update
	URL         *string  `json:"url,omitempty"`
	Topics      []string `json:"topics,omitempty"`
	Description *string  `json:"description,omitempty"`
	// SetDescription: an update sets description (to nil: clears it).
	SetDescription bool  `json:"set_description,omitempty"`
	IsActive       *bool `json:"is_active,omitempty"`
	// create, rotate_secret and reseal: the new secret, sealed (never plain
	// text).
	Secret string `json:"secret,omitempty"`
	// reseal: the sealed value Secret replaces, and the same pair for the
	// previous secret (both empty when it is not resealed).
	OldSecret         string `json:"old_secret,omitempty"`
	PreviousSecret    string `json:"previous_secret,omitempty"`
	OldPreviousSecret string `json:"old_previous_secret,omitempty"`
	// disable: the generation the failures were counted for, and why.
	Gen    int    `json:"gen,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Webhook is the decider's state of one webhook: what its events carry,
// plus its sealed secrets and creation time. The json names are the
// webhooks table's columns (the fact's fields are promoted): the decider
// writes a batch's webhooks as one JSON array (jsonb_populate_recordset).
type Webhook struct {
	schemas.WebhookFact
	Secret              string     `json:"secret"` // sealed
	PreviousSecret      *string    `json:"previous_secret"`
	PreviousSecretUntil *time.Time `json:"previous_secret_until"`
	CreatedAt           time.Time  `json:"created_at"`
}

// PreviousSigns says whether w's previous secret still signs beside the
// current one at now (its rotation's overlap has not ended).
func (w Webhook) PreviousSigns(now time.Time) bool {
	return w.PreviousSecret != nil && w.PreviousSecretUntil != nil && now.Before(*w.PreviousSecretUntil)
}

// Fact is the webhook as its events carry it.
func (w Webhook) Fact() schemas.WebhookFact { return w.WebhookFact }

// Change is what Decide did to the command's webhook: the new state (nil
// when deleted or unchanged) and the event type announcing it. With no
// event type, a Webhook is a change no client sees (a reseal): it is saved
// and not announced; without one either, nothing changed.
type Change struct {
	Webhook   *Webhook
	EventType string
}

// Decide applies c to the client's webhooks (all of them, by id).
func Decide(hooks map[uuid.UUID]*Webhook, c Command, now time.Time) (Change, error) {
	now = now.UTC()
	w := hooks[c.WebhookID]
	if w != nil && w.AccountID != c.AccountID {
		w = nil // another client's webhook does not exist for this one
	}
	if c.Kind == KindCreate {
		if w != nil {
			return Change{}, nil // the same create again
		}
		if len(hooks) >= MaxPerClient {
			return Change{}, ErrLimitReached
		}
		if c.URL == nil || len(c.Topics) == 0 || c.Secret == "" {
			return Change{}, errors.New("create command without url, topics or secret")
		}
		nw := &Webhook{WebhookFact: schemas.WebhookFact{ID: c.WebhookID, AccountID: c.AccountID, URL: *c.URL,
			Description: c.Description, Topics: c.Topics, IsActive: true, Gen: 1, UpdatedAt: now}, Secret: c.Secret, CreatedAt: now}
		return Change{Webhook: nw, EventType: schemas.TypeWebhookCreated}, nil
	}
	if w == nil {
		return Change{}, ErrNotFound
	}
	nw := *w
	switch c.Kind {
	case KindDelete:
		return Change{EventType: schemas.TypeWebhookDeleted}, nil
	case KindRotate:
		if c.Secret == "" {
			return Change{}, errors.New("rotate command without secret")
		}
		prev, until := w.Secret, now.Add(RotationOverlap)
		nw.PreviousSecret, nw.PreviousSecretUntil, nw.Secret = &prev, &until, c.Secret
		nw.UpdatedAt = now
		return Change{Webhook: &nw, EventType: schemas.TypeWebhookSecretRotated}, nil
	case KindReseal:
		return reseal(w, c)
	case KindDisable:
		if !w.IsActive || w.Gen != c.Gen {
			return Change{}, nil // already off, or counted for an earlier activation
		}
		reason := c.Reason
		nw.IsActive, nw.DisabledReason, nw.UpdatedAt = false, &reason, now
		return Change{Webhook: &nw, EventType: schemas.TypeWebhookDisabled}, nil
	case KindUpdate:
		typ := schemas.TypeWebhookUpdated
		if c.URL != nil {
			nw.URL = *c.URL
		}
		if c.Topics != nil {
			nw.Topics = c.Topics
		}
		if c.SetDescription {
			nw.Description = c.Description
		}
		if c.IsActive != nil {
			switch {
			case *c.IsActive && !w.IsActive:
				nw.IsActive, nw.DisabledReason = true, nil
				nw.Gen++ // a fresh failure streak; older pending deliveries stay cancelled
				typ = schemas.TypeWebhookEnabled
			case !*c.IsActive && w.IsActive:
				nw.IsActive, nw.DisabledReason = false, nil
				typ = schemas.TypeWebhookDisabled
			}
		}
		nw.UpdatedAt = now
		return Change{Webhook: &nw, EventType: typ}, nil
	}
	return Change{}, errors.New("unknown webhook command kind " + c.Kind)
}

// reseal replaces each secret c names by its new sealing while the stored
// value is still the one c replaces; after a rotation it changes nothing.
func reseal(w *Webhook, c Command) (Change, error) {
	if (c.Secret == "") != (c.OldSecret == "") || (c.PreviousSecret == "") != (c.OldPreviousSecret == "") ||
		c.Secret == "" && c.PreviousSecret == "" {
		return Change{}, errors.New("reseal command without a secret and the value it replaces")
	}
	nw := *w
	changed := false
	if c.Secret != "" && w.Secret == c.OldSecret {
		nw.Secret, changed = c.Secret, true
	}
	if c.PreviousSecret != "" && w.PreviousSecret != nil && *w.PreviousSecret == c.OldPreviousSecret {
		prev := c.PreviousSecret
		nw.PreviousSecret, changed = &prev, true
	}
	if !changed {
		return Change{}, nil
	}
	return Change{Webhook: &nw}, nil
}
