package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/podtest"
	"github.com/printpod/pod/internal/secretbox"
	"github.com/printpod/pod/internal/testenv"
	"github.com/printpod/pod/schemas"
)

// resealRun is what `podctl webhooks reseal` prints on stdout.
type resealRun struct {
	DryRun     bool        `json:"dry_run"`
	ToReseal   int         `json:"to_reseal"`
	Resealed   int         `json:"resealed"`
	Already    int         `json:"already"`
	Unreadable []uuid.UUID `json:"unreadable"`
}

// storedSecrets is a webhook's row as far as a reseal touches it.
type storedSecrets struct {
	Secret    string
	Previous  *string
	UpdatedAt time.Time
}

func readStoredSecrets(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) storedSecrets {
	t.Helper()
	var s storedSecrets
	if err := pool.QueryRow(context.Background(), `SELECT secret, previous_secret, updated_at FROM webhooks WHERE id = $1`,
		id).Scan(&s.Secret, &s.Previous, &s.UpdatedAt); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPodctlWebhooksResealMovesSecretsToTheNewKey rotates the key of
// POD_WEBHOOK_SECRET_KEY as deploy/README.md says: with secrets sealed
// with K0, podsvc restarts with [K1, K0], `podctl webhooks reseal` runs,
// and podsvc restarted with K1 alone still signs every delivery with the
// client's secrets.
func TestPodctlWebhooksResealMovesSecretsToTheNewKey(t *testing.T) {
	bin := buildPodctl(t)
	rc1, rc2 := newReceiver(t), newReceiver(t)
	d := startDemo(t, allow(rc1, rc2)) // its ring is one random key: K0
	keys, err := secretbox.ParseKeys(d.cfg.WebhookSecretKey)
	if err != nil || len(keys) != 1 {
		t.Fatalf("the test config's key ring: %d keys, %v", len(keys), err)
	}
	k1 := make([]byte, 32)
	_, _ = rand.Read(k1)
	k0s, k1s := d.cfg.WebhookSecretKey, base64.StdEncoding.EncodeToString(k1)
	onlyK0, _ := secretbox.New(keys[0])
	onlyK1, _ := secretbox.New(k1)

	// Two webhooks sealed with K0; the second rotated, so its previous
	// secret, sealed with K0 too, still signs beside the new one.
	w1 := createWebhook(t, d.client, rc1.url("/hooks"))
	w2 := createWebhook(t, d.client, rc2.url("/hooks"))
	r := d.client.Do("POST", "/v1/me/webhooks/"+w2.ID.String()+"/rotate-secret", nil)
	var w2r webhookJSON
	r.JSON(t, &w2r)
	if r.Status != 200 || w2r.Secret == "" || w2r.Secret == w2.Secret {
		t.Fatalf("rotate: %d %s", r.Status, r.Body)
	}

	// podsvc restarts with the new key first.
	d.app.Stop()
	cfg := d.cfg
	cfg.WebhookSecretKey = k1s + "," + k0s
	a := podtest.Start(t, cfg)
	before := map[uuid.UUID]storedSecrets{w1.ID: readStoredSecrets(t, a.Pool, w1.ID), w2.ID: readStoredSecrets(t, a.Pool, w2.ID)}
	for id, s := range before {
		if !onlyK0.SealedWithFirst(s.Secret) || (id == w2.ID && (s.Previous == nil || !onlyK0.SealedWithFirst(*s.Previous))) {
			t.Fatalf("webhook %s is not sealed with K0 before the reseal", id)
		}
	}
	events := topicSize(t, a.Brokers, a.Naming.Topic(schemas.TopicWebhookEvents))
	commands := topicSize(t, a.Brokers, a.Naming.Topic(schemas.TopicWebhookCommands))

	env := d.podctlEnv()
	reseal := func(ring string, args ...string) (podctlRun, resealRun) {
		t.Helper()
		r := runPodctl(t, bin, append(env, "POD_WEBHOOK_SECRET_KEY="+ring), append([]string{"webhooks", "reseal"}, args...)...)
		for _, secret := range []string{w1.Secret, w2.Secret, w2r.Secret} {
			if strings.Contains(r.stdout+r.stderr, secret) || strings.Contains(r.stdout+r.stderr, "whsec_") {
				t.Fatalf("podctl webhooks reseal printed a secret:\nstdout %s\nstderr %s", r.stdout, r.stderr)
			}
		}
		var out resealRun
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("podctl webhooks reseal printed %q (%v); stderr %s", r.stdout, err, r.stderr)
		}
		return r, out
	}
	unchanged := func(when string) {
		t.Helper()
		for id, s := range before {
			got := readStoredSecrets(t, a.Pool, id)
			if got.Secret != s.Secret || (got.Previous == nil) != (s.Previous == nil) || got.Previous != nil && *got.Previous != *s.Previous {
				t.Fatalf("%s: webhook %s changed", when, id)
			}
		}
	}

	// A dry run counts and changes nothing.
	run, out := reseal(k1s+","+k0s, "--dry-run")
	if run.err != nil || !out.DryRun || out.ToReseal != 2 || out.Already != 0 || len(out.Unreadable) != 0 {
		t.Fatalf("dry run: %v %+v\n%s", run.err, out, run.stderr)
	}
	unchanged("after the dry run")

	// A wait of 0 is refused before any command is sent (found by review:
	// one was sent, then the wait failed the run).
	if r := runPodctl(t, bin, append(env, "POD_WEBHOOK_SECRET_KEY="+k1s+","+k0s), "webhooks", "reseal", "--wait", "0"); r.err == nil ||
		!strings.Contains(r.stderr, "--wait must be positive") {
		t.Fatalf("reseal --wait 0: %v\nstdout %s\nstderr %s", r.err, r.stdout, r.stderr)
	}
	if n := topicSize(t, a.Brokers, a.Naming.Topic(schemas.TopicWebhookCommands)); n != commands {
		t.Fatalf("reseal --wait 0 sent %d webhook commands", n-commands)
	}
	unchanged("after the reseal with no wait")

	// A ring without K0 opens nothing: podctl names both webhooks, fails,
	// and changes nothing.
	run, out = reseal(k1s)
	if run.err == nil || len(out.Unreadable) != 2 || out.Resealed != 0 ||
		!strings.Contains(run.stderr, w1.ID.String()) || !strings.Contains(run.stderr, w2.ID.String()) {
		t.Fatalf("reseal without K0: %v %+v\n%s", run.err, out, run.stderr)
	}
	unchanged("after the reseal without K0")

	run, out = reseal(k1s + "," + k0s)
	if run.err != nil || out.Resealed != 2 || out.Already != 0 || len(out.Unreadable) != 0 {
		t.Fatalf("reseal: %v %+v\n%s", run.err, out, run.stderr)
	}
	if !strings.Contains(run.stderr, "checked 2 of 2 webhooks: 2 resealed") {
		t.Errorf("reseal progress: %s", run.stderr)
	}

	// K1 alone opens every secret that signs, to the same plain secrets;
	// clients see no change: no event, the same updated_at.
	want := map[uuid.UUID][2]string{w1.ID: {w1.Secret}, w2.ID: {w2r.Secret, w2.Secret}}
	for id, plain := range want {
		s := readStoredSecrets(t, a.Pool, id)
		if got, err := onlyK1.Open(s.Secret); err != nil || got != plain[0] {
			t.Errorf("webhook %s: K1 alone opens its secret to the client's? %v, %v", id, got == plain[0], err)
		}
		if plain[1] != "" {
			if s.Previous == nil {
				t.Fatalf("webhook %s lost its previous secret", id)
			}
			if got, err := onlyK1.Open(*s.Previous); err != nil || got != plain[1] {
				t.Errorf("webhook %s: K1 alone opens its previous secret to the client's? %v, %v", id, got == plain[1], err)
			}
		}
		if !s.UpdatedAt.Equal(before[id].UpdatedAt) {
			t.Errorf("webhook %s: updated_at %s after the reseal, %s before", id, s.UpdatedAt, before[id].UpdatedAt)
		}
	}
	if n := topicSize(t, a.Brokers, a.Naming.Topic(schemas.TopicWebhookEvents)); n != events {
		t.Errorf("pod.webhook.events holds %d records after the reseal, %d before", n, events)
	}

	// Again: nothing left.
	run, out = reseal(k1s + "," + k0s)
	if run.err != nil || out.Resealed != 0 || out.Already != 2 || len(out.Unreadable) != 0 {
		t.Fatalf("second reseal: %v %+v\n%s", run.err, out, run.stderr)
	}

	// K0 leaves the ring: deliveries are still signed with the clients'
	// secrets, the rotated webhook's with both.
	a.Stop()
	cfg.WebhookSecretKey = k1s
	a = podtest.Start(t, cfg)
	c := testenv.NewClient(t, "http://"+a.Addr(), cfg.DemoToken)
	rc1.setSecret(w1.Secret)
	rc2.setSecret(w2r.Secret)
	if g := waitReceived(t, rc1, sendTest(t, c, w1.ID).EventID, 20*time.Second); !g.SigOK || !g.StdOK {
		t.Errorf("the first webhook's test delivery with K1 alone: signatures %v/%v", g.SigOK, g.StdOK)
	}
	g := waitReceived(t, rc2, sendTest(t, c, w2.ID).EventID, 20*time.Second)
	if !g.SigOK || !g.StdOK {
		t.Errorf("the rotated webhook's test delivery with K1 alone: signatures %v/%v", g.SigOK, g.StdOK)
	}
	sigs := g.Header.Get("webhook-signature")
	if len(strings.Fields(sigs)) != 2 || !verifyStandardSignature(w2.Secret, g.Header.Get("webhook-id"), g.Header.Get("webhook-timestamp"), g.Body, sigs) {
		t.Errorf("the rotated webhook's delivery is not signed with its previous secret too: %q", sigs)
	}
}
