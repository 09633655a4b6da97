package webhook

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/decider"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/secretbox"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	earlier := now.Add(-time.Hour)
	client, other := uuid.New(), uuid.New()
	hookID := uuid.New()
	str := func(s string) *string { return &s }
	yes, no := true, false
	reason := ReasonTooManyFailures

	// active is a webhook of client at generation 2.
	active := func() *Webhook {
		return &Webhook{WebhookFact: schemas.WebhookFact{ID: hookID, AccountID: client, URL: "https://shop.example/hooks",
			Description: str("orders"), Topics: []string{"order.created"}, IsActive: true, Gen: 2, UpdatedAt: earlier},
			Secret: "sealed-1", CreatedAt: earlier}
	}
	disabled := func() *Webhook {
		w := active()
		w.IsActive, w.DisabledReason = false, &reason
		return w
	}
	// rotated is active() after a rotation: sealed-2 signs, sealed-1 still
	// signs beside it.
	until := earlier.Add(RotationOverlap)
	rotated := func() *Webhook {
		w := active()
		w.Secret, w.PreviousSecret, w.PreviousSecretUntil = "sealed-2", str("sealed-1"), &until
		return w
	}
	// resealed is base with its secrets edited and nothing else: a reseal
	// leaves updated_at alone.
	resealed := func(base func() *Webhook, edit func(*Webhook)) *Webhook {
		w := base()
		edit(w)
		return w
	}
	hooksOf := func(ws ...*Webhook) map[uuid.UUID]*Webhook {
		m := map[uuid.UUID]*Webhook{}
		for _, w := range ws {
			m[w.ID] = w
		}
		return m
	}
	fiveOthers := func() map[uuid.UUID]*Webhook {
		m := map[uuid.UUID]*Webhook{}
		for range MaxPerClient {
			w := active()
			w.ID = uuid.New()
			m[w.ID] = w
		}
		return m
	}
	create := Command{ID: uuid.New(), Kind: KindCreate, AccountID: client, WebhookID: hookID,
		URL: str("https://shop.example/hooks"), Topics: []string{"order.created"}, Secret: "sealed-1"}
	cmd := func(kind string, edit func(*Command)) Command {
		c := Command{ID: uuid.New(), Kind: kind, AccountID: client, WebhookID: hookID}
		if edit != nil {
			edit(&c)
		}
		return c
	}
	// changed is active() after edit, updated now.
	changed := func(base func() *Webhook, edit func(*Webhook)) *Webhook {
		w := base()
		edit(w)
		w.UpdatedAt = now
		return w
	}

	for _, tc := range []struct {
		name    string
		hooks   map[uuid.UUID]*Webhook
		cmd     Command
		want    Change
		wantErr error // nil: no error; errAny: any error
	}{
		{"a create makes an active webhook of generation 1", hooksOf(), create,
			Change{Webhook: &Webhook{WebhookFact: schemas.WebhookFact{ID: hookID, AccountID: client, URL: "https://shop.example/hooks",
				Topics: []string{"order.created"}, IsActive: true, Gen: 1, UpdatedAt: now}, Secret: "sealed-1", CreatedAt: now},
				EventType: schemas.TypeWebhookCreated}, nil},
		{"the same create again changes nothing", hooksOf(active()), create, Change{}, nil},
		{"a sixth webhook is refused", fiveOthers(), create, Change{}, ErrLimitReached},
		{"a create without a secret is refused", hooksOf(), cmd(KindCreate, func(c *Command) { c.URL, c.Topics = str("https://x.example"), []string{"order.created"} }), Change{}, errAny},
		{"another client's webhook is not found", hooksOf(active()), cmd(KindUpdate, func(c *Command) { c.AccountID = other; c.URL = str("https://y.example") }), Change{}, ErrNotFound},
		{"an update of a missing webhook is not found", hooksOf(), cmd(KindUpdate, func(c *Command) { c.URL = str("https://y.example") }), Change{}, ErrNotFound},
		{"a delete announces the deletion and leaves no state", hooksOf(active()), cmd(KindDelete, nil), Change{EventType: schemas.TypeWebhookDeleted}, nil},
		{"a rotation signs with the new secret and keeps the old one for the overlap", hooksOf(active()), cmd(KindRotate, func(c *Command) { c.Secret = "sealed-2" }),
			Change{Webhook: changed(active, func(w *Webhook) {
				until := now.Add(RotationOverlap)
				w.Secret, w.PreviousSecret, w.PreviousSecretUntil = "sealed-2", str("sealed-1"), &until
			}), EventType: schemas.TypeWebhookSecretRotated}, nil},
		{"a rotation without a secret is refused", hooksOf(active()), cmd(KindRotate, nil), Change{}, errAny},
		{"an automatic disable of the current generation turns it off with its reason", hooksOf(active()),
			cmd(KindDisable, func(c *Command) { c.Gen, c.Reason = 2, ReasonTooManyFailures }),
			Change{Webhook: changed(active, func(w *Webhook) { w.IsActive, w.DisabledReason = false, &reason }), EventType: schemas.TypeWebhookDisabled}, nil},
		{"an automatic disable counted for an earlier generation changes nothing", hooksOf(active()),
			cmd(KindDisable, func(c *Command) { c.Gen, c.Reason = 1, ReasonTooManyFailures }), Change{}, nil},
		{"an automatic disable of an inactive webhook changes nothing", hooksOf(disabled()),
			cmd(KindDisable, func(c *Command) { c.Gen, c.Reason = 2, ReasonTooManyFailures }), Change{}, nil},
		{"re-activation starts a new generation and clears the reason", hooksOf(disabled()), cmd(KindUpdate, func(c *Command) { c.IsActive = &yes }),
			Change{Webhook: changed(active, func(w *Webhook) { w.Gen = 3 }), EventType: schemas.TypeWebhookEnabled}, nil},
		{"the client's deactivation keeps the generation and gives no reason", hooksOf(active()), cmd(KindUpdate, func(c *Command) { c.IsActive = &no }),
			Change{Webhook: changed(active, func(w *Webhook) { w.IsActive = false }), EventType: schemas.TypeWebhookDisabled}, nil},
		{"activating an active webhook is a plain update", hooksOf(active()), cmd(KindUpdate, func(c *Command) { c.IsActive = &yes }),
			Change{Webhook: changed(active, func(*Webhook) {}), EventType: schemas.TypeWebhookUpdated}, nil},
		{"an update sets url and topics and leaves the description", hooksOf(active()),
			cmd(KindUpdate, func(c *Command) { c.URL, c.Topics = str("https://new.example/h"), []string{"order.cancelled"} }),
			Change{Webhook: changed(active, func(w *Webhook) { w.URL, w.Topics = "https://new.example/h", []string{"order.cancelled"} }), EventType: schemas.TypeWebhookUpdated}, nil},
		{"an update can clear the description", hooksOf(active()), cmd(KindUpdate, func(c *Command) { c.SetDescription = true }),
			Change{Webhook: changed(active, func(w *Webhook) { w.Description = nil }), EventType: schemas.TypeWebhookUpdated}, nil},
		{"a reseal replaces the secret it names", hooksOf(active()),
			cmd(KindReseal, func(c *Command) { c.Secret, c.OldSecret = "resealed-1", "sealed-1" }),
			Change{Webhook: resealed(active, func(w *Webhook) { w.Secret = "resealed-1" })}, nil},
		{"a reseal after a rotation changes nothing", hooksOf(rotated()),
			cmd(KindReseal, func(c *Command) { c.Secret, c.OldSecret = "resealed-1", "sealed-1" }), Change{}, nil},
		{"a reseal of the previous secret", hooksOf(rotated()),
			cmd(KindReseal, func(c *Command) { c.PreviousSecret, c.OldPreviousSecret = "resealed-1", "sealed-1" }),
			Change{Webhook: resealed(rotated, func(w *Webhook) { w.PreviousSecret = str("resealed-1") })}, nil},
		{"a reseal of both secrets replaces both", hooksOf(rotated()),
			cmd(KindReseal, func(c *Command) {
				c.Secret, c.OldSecret, c.PreviousSecret, c.OldPreviousSecret = "resealed-2", "sealed-2", "resealed-1", "sealed-1"
			}),
			Change{Webhook: resealed(rotated, func(w *Webhook) { w.Secret, w.PreviousSecret = "resealed-2", str("resealed-1") })}, nil},
		{"a reseal of a previous secret that was replaced meanwhile changes nothing", hooksOf(active()),
			cmd(KindReseal, func(c *Command) { c.PreviousSecret, c.OldPreviousSecret = "resealed-0", "sealed-0" }), Change{}, nil},
		{"another account's webhook is not found", hooksOf(active()),
			cmd(KindReseal, func(c *Command) { c.AccountID = other; c.Secret, c.OldSecret = "resealed-1", "sealed-1" }), Change{}, ErrNotFound},
		{"a reseal without the value it replaces is refused", hooksOf(active()),
			cmd(KindReseal, func(c *Command) { c.Secret = "resealed-1" }), Change{}, errAny},
		{"a reseal of nothing is refused", hooksOf(active()), cmd(KindReseal, nil), Change{}, errAny},
		{"an unknown kind is refused", hooksOf(active()), cmd("explode", nil), Change{}, errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := map[uuid.UUID]Webhook{}
			for id, w := range tc.hooks {
				before[id] = *w
			}
			got, err := Decide(tc.hooks, tc.cmd, now.In(time.FixedZone("elsewhere", 3600)))
			switch {
			case tc.wantErr == errAny && err == nil:
				t.Fatalf("Decide accepted the command: %+v", got)
			case tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("Decide error = %v, want %v", err, tc.wantErr)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Decide =\n  %+v\nwant\n  %+v", describe(got), describe(tc.want))
			}
			for id, w := range tc.hooks {
				if !reflect.DeepEqual(*w, before[id]) {
					t.Fatalf("Decide changed its input state of %s", id)
				}
			}
		})
	}
}

var errAny = errors.New("any error")

func describe(c Change) any {
	if c.Webhook == nil {
		return c
	}
	return struct {
		Webhook   Webhook
		EventType string
	}{*c.Webhook, c.EventType}
}

// TestADecisionIsDatedByItsCommandRecord: a decision's time is the command
// record's, not the clock's, so a batch decided again (after a crash, or
// on a replay) stores the same decision, and a repeated request's secret
// window runs from when the request was made.
func TestADecisionIsDatedByItsCommandRecord(t *testing.T) {
	d := &Decider{}
	at := time.Date(2026, 11, 26, 9, 30, 0, 123456789, time.UTC)
	c := Command{ID: uuid.New(), Kind: KindCreate, AccountID: uuid.New(), WebhookID: uuid.New(),
		URL: new("https://shop.example/hooks"), Topics: []string{"order.created"}, Secret: "sealed"}
	for _, h := range []*clientHooks{nil, newClientHooks()} {
		out, err := d.Decide(h, c, at)
		if err != nil {
			t.Fatal(err)
		}
		if want := at.Truncate(time.Microsecond); !out.Decision.DecidedAt.Equal(want) {
			t.Errorf("decided at %s, want the record's time %s", out.Decision.DecidedAt, want)
		}
	}
}

// TestAResealIsSavedWithoutAnEvent: the decider writes a resealed webhook
// and announces nothing; a reseal that lost to a rotation writes nothing.
func TestAResealIsSavedWithoutAnEvent(t *testing.T) {
	d := &Decider{}
	at := time.Date(2026, 11, 26, 9, 30, 0, 0, time.UTC)
	before := at.Add(-time.Hour)
	w := &Webhook{WebhookFact: schemas.WebhookFact{ID: uuid.New(), AccountID: uuid.New(), URL: "https://shop.example/hooks",
		Topics: []string{"order.created"}, IsActive: true, Gen: 1, UpdatedAt: before}, Secret: "sealed-1", CreatedAt: before}
	h := newClientHooks()
	h.hooks[w.ID] = w
	c := Command{ID: uuid.New(), Kind: KindReseal, AccountID: w.AccountID, WebhookID: w.ID, Secret: "resealed-1", OldSecret: "sealed-1"}
	out, err := d.Decide(h, c, at)
	if err != nil || out.Decision.Code != "" {
		t.Fatalf("reseal: %v %+v", err, out.Decision)
	}
	if !out.Changed || !h.changed[w.ID] || len(out.Events) != 0 {
		t.Fatalf("reseal: changed %v (webhook %v), %d events; want saved with no event", out.Changed, h.changed[w.ID], len(out.Events))
	}
	if got := h.hooks[w.ID]; got.Secret != "resealed-1" || !got.UpdatedAt.Equal(before) {
		t.Fatalf("resealed webhook: secret %q, updated_at %s", got.Secret, got.UpdatedAt)
	}

	h = newClientHooks()
	h.hooks[w.ID] = w
	c.ID, c.OldSecret = uuid.New(), "sealed-0"
	if out, err := d.Decide(h, c, at); err != nil || out.Changed || len(h.changed) != 0 || len(out.Events) != 0 || out.Decision.Code != "" {
		t.Fatalf("a reseal of a value no longer stored: %v changed %v, %d events, code %q", err, out.Changed, len(out.Events), out.Decision.Code)
	}
}

// TestAResealThisPodsvcCannotOpenIsRefused: a decider with the service's
// key ring refuses a reseal sealed with a key it does not have (podctl run
// with a key list podsvc was not restarted with), or holding another
// secret than the one it replaces, and applies one it opens to the same
// secret.
func TestAResealThisPodsvcCannotOpenIsRefused(t *testing.T) {
	key := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	box := func(keys ...[]byte) *secretbox.Box {
		b, err := secretbox.New(keys...)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	seal := func(b *secretbox.Box, s string) string {
		v, err := b.Seal(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	k0, k1, k2 := key(1), key(2), key(3)
	service := box(k1, k0) // podsvc restarted with the new key first
	old := seal(box(k0), "whsec_client")
	at := time.Date(2026, 11, 26, 9, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		sealing  string
		accepted bool
	}{
		{"a sealing with the service's first key is applied", seal(box(k1), "whsec_client"), true},
		{"a sealing with a key the service does not have is refused", seal(box(k2), "whsec_client"), false},
		{"a sealing of another secret is refused", seal(box(k1), "whsec_other"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Webhook{WebhookFact: schemas.WebhookFact{ID: uuid.New(), AccountID: uuid.New(), URL: "https://shop.example/hooks",
				Topics: []string{"order.created"}, IsActive: true, Gen: 1, UpdatedAt: at}, Secret: old, CreatedAt: at}
			h := newClientHooks()
			h.hooks[w.ID] = w
			d := &Decider{Log: slog.New(slog.DiscardHandler), Box: service}
			out, err := d.Decide(h, Command{ID: uuid.New(), Kind: KindReseal, AccountID: w.AccountID, WebhookID: w.ID,
				Secret: tc.sealing, OldSecret: old}, at)
			if err != nil {
				t.Fatal(err)
			}
			if applied := out.Decision.Code == "" && out.Changed && h.hooks[w.ID].Secret == tc.sealing; applied != tc.accepted {
				t.Fatalf("applied %v (code %q %s, secret replaced %v), want %v", applied, out.Decision.Code, out.Decision.Message,
					h.hooks[w.ID].Secret == tc.sealing, tc.accepted)
			}
			if !tc.accepted && (out.Decision.Code != schemas.CodeValidation || out.Changed) {
				t.Fatalf("a refused reseal: code %q, changed %v", out.Decision.Code, out.Changed)
			}
		})
	}
}

// TestADeadLetteredChangeIsRefusedAndAnnounced: a client's webhook change
// whose record is dead-lettered is refused for good, recorded and
// announced, so the request waiting for it is answered (found by review:
// it waited, then was told the change would still be applied). An
// automatic disable is left to a replay of its dead letter.
func TestADeadLetteredChangeIsRefusedAndAnnounced(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	rt := decider.Runtime[Command, *clientHooks, Decision]{Model: &Decider{}, Decisions: Decisions}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `LISTEN `+NotifyDecided); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		kind    string
		refused bool
	}{
		{"a create is refused", KindCreate, true},
		{"an update is refused", KindUpdate, true},
		{"an automatic disable is left to a replay", KindDisable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Command{ID: uuid.New(), Kind: tc.kind, AccountID: uuid.New(), WebhookID: uuid.New()}
			value, err := codec.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return rt.DeadLettered(ctx, tx, &kgo.Record{Value: value}, errors.New("cannot apply"))
			}); err != nil {
				t.Fatal(err)
			}
			var code *string
			err = pool.QueryRow(ctx, `SELECT error_code FROM webhook_decisions WHERE command_id = $1`, c.ID).Scan(&code)
			switch {
			case !tc.refused && errors.Is(err, pgx.ErrNoRows):
				return
			case err != nil || !tc.refused:
				t.Fatalf("decision: %v, %v; want refused %v", code, err, tc.refused)
			case code == nil || *code != schemas.CodeInternal:
				t.Fatalf("decision code %v, want %s", code, schemas.CodeInternal)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			note, err := conn.Conn().WaitForNotification(wctx)
			if err != nil || !strings.HasPrefix(note.Payload, c.ID.String()) {
				t.Fatalf("announcement %v (%v), want the refusal of %s", note, err, c.ID)
			}
		})
	}
}
