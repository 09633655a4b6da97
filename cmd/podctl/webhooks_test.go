package main

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/commands/webhook"
	"github.com/printpod/pod/internal/pgtest"
	"github.com/printpod/pod/internal/secretbox"
	"github.com/printpod/pod/schemas"
)

func testBoxes(t *testing.T) (old, ring, other *secretbox.Box) {
	t.Helper()
	keys := make([][]byte, 3)
	for i := range keys {
		keys[i] = make([]byte, 32)
		_, _ = rand.Read(keys[i])
	}
	var err error
	if old, err = secretbox.New(keys[0]); err == nil {
		if ring, err = secretbox.New(keys[1], keys[0]); err == nil {
			other, err = secretbox.New(keys[2])
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return old, ring, other
}

func TestStale(t *testing.T) {
	old, ring, other := testBoxes(t)
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	seal := func(b *secretbox.Box) string {
		s, err := b.Seal("whsec_x")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	byOld, byNew, byOther := seal(old), seal(ring), seal(other)
	later, earlier := now.Add(time.Hour), now.Add(-time.Hour)
	for _, tc := range []struct {
		name             string
		h                *webhook.Webhook
		secret, previous bool
	}{
		{"a secret sealed with the first key is left alone", &webhook.Webhook{Secret: byNew}, false, false},
		{"a secret sealed with an older key is stale", &webhook.Webhook{Secret: byOld}, true, false},
		{"a previous secret that still signs is stale when an older key sealed it",
			&webhook.Webhook{Secret: byNew, PreviousSecret: &byOld, PreviousSecretUntil: &later}, false, true},
		{"a previous secret past its overlap is left alone", &webhook.Webhook{Secret: byNew, PreviousSecret: &byOld, PreviousSecretUntil: &earlier}, false, false},
		{"both can be stale", &webhook.Webhook{Secret: byOld, PreviousSecret: &byOld, PreviousSecretUntil: &later}, true, true},
		{"a previous secret sealed with the first key is left alone", &webhook.Webhook{Secret: byOld, PreviousSecret: &byNew, PreviousSecretUntil: &later}, true, false},
		{"a previous secret that opens with no key is left alone, and the secret is still resealed",
			&webhook.Webhook{Secret: byOld, PreviousSecret: &byOther, PreviousSecretUntil: &later}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, p := stale(ring, tc.h, now); s != tc.secret || p != tc.previous {
				t.Fatalf("stale = %v, %v; want %v, %v", s, p, tc.secret, tc.previous)
			}
		})
	}
}

func TestResealCommand(t *testing.T) {
	old, ring, other := testBoxes(t)
	sealedOld, _ := old.Seal("whsec_current")
	prevOld, _ := old.Seal("whsec_previous")
	until := time.Now().Add(time.Hour)
	h := &webhook.Webhook{WebhookFact: schemas.WebhookFact{ID: uuid.New(), AccountID: uuid.New()}, Secret: sealedOld, PreviousSecret: &prevOld, PreviousSecretUntil: &until}

	c, err := resealCommand(ring, h, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != webhook.KindReseal || c.AccountID != h.AccountID || c.WebhookID != h.ID ||
		c.OldSecret != sealedOld || c.OldPreviousSecret != prevOld {
		t.Fatalf("command %+v", c)
	}
	for sealed, plain := range map[string]string{c.Secret: "whsec_current", c.PreviousSecret: "whsec_previous"} {
		if !ring.SealedWithFirst(sealed) {
			t.Errorf("%s is not sealed with the first key", sealed)
		}
		if got, err := ring.Open(sealed); err != nil || got != plain {
			t.Errorf("the new sealing opens to %q (%v), want %q", got, err, plain)
		}
	}
	again, _ := resealCommand(ring, h, true, true)
	if again.ID != c.ID || again.Secret == c.Secret {
		t.Errorf("a second reseal of the same values: id %s and %s (want equal), secrets equal %v (want a new nonce)",
			again.ID, c.ID, again.Secret == c.Secret)
	}
	only, _ := resealCommand(ring, h, true, false)
	if only.ID == c.ID || only.PreviousSecret != "" || only.OldPreviousSecret != "" {
		t.Errorf("a reseal of the secret alone: %+v", only)
	}
	if _, err := resealCommand(other, h, true, false); !errors.Is(err, secretbox.ErrOpen) {
		t.Errorf("a secret no key opens: %v, want ErrOpen", err)
	}
}

// TestResealDryRunReadsEveryPage: a dry run counts every webhook, over
// several pages, and changes none.
func TestResealDryRunReadsEveryPage(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	old, ring, other := testBoxes(t)
	now := time.Now()
	later, earlier := now.Add(time.Hour), now.Add(-time.Hour)
	var (
		ids, accounts   []uuid.UUID
		secrets         []string
		prevs           []*string
		untils          []*time.Time
		wantUnreadable  []uuid.UUID
		toReseal, fresh int
	)
	add := func(secret string, prev *string, until *time.Time) uuid.UUID {
		id := uuid.New()
		ids, accounts, secrets, prevs, untils = append(ids, id), append(accounts, uuid.New()), append(secrets, secret), append(prevs, prev), append(untils, until)
		return id
	}
	seal := func(b *secretbox.Box) string {
		s, err := b.Seal("whsec_x")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i := range 2*resealPage + 30 {
		switch i % 5 {
		case 0: // sealed with the first key
			add(seal(ring), nil, nil)
			fresh++
		case 1: // sealed with the old key
			add(seal(old), nil, nil)
			toReseal++
		case 2: // a previous secret with the old key that still signs
			p := seal(old)
			add(seal(ring), &p, &later)
			toReseal++
		case 3: // one that no longer signs
			p := seal(old)
			add(seal(ring), &p, &earlier)
			fresh++
		case 4:
			if i%10 == 4 {
				wantUnreadable = append(wantUnreadable, add(seal(other), nil, nil))
			} else {
				add(seal(old), nil, nil)
				toReseal++
			}
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhooks (id, account_id, url, topics, is_active, gen, secret, previous_secret,
		previous_secret_until, created_at, updated_at)
		SELECT id, account, 'https://shop.example/h', '{order.created}', true, 1, secret, prev, until, now(), now()
		FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::timestamptz[]) AS w(id, account, secret, prev, until)`,
		ids, accounts, secrets, prevs, untils); err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	sum, err := (&resealer{pool: pool, box: ring, log: &progress}).run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(wantUnreadable, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	if sum.resealed != toReseal || sum.already != fresh || !slices.Equal(sum.unreadable, wantUnreadable) {
		t.Fatalf("dry run: %d to reseal, %d already, %d unreadable; want %d, %d, %d",
			sum.resealed, sum.already, len(sum.unreadable), toReseal, fresh, len(wantUnreadable))
	}
	if lines := strings.Count(progress.String(), "\n"); lines != 3 {
		t.Errorf("%d progress lines for 3 pages:\n%s", lines, progress.String())
	}
	var changed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhooks w JOIN unnest($1::uuid[], $2::text[]) AS s(id, secret)
		ON w.id = s.id WHERE w.secret <> s.secret`, ids, secrets).Scan(&changed); err != nil || changed != 0 {
		t.Fatalf("the dry run changed %d webhooks (%v)", changed, err)
	}
}
