package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/webhook"
	"github.com/printpod/pod/internal/logging"
	"github.com/printpod/pod/internal/pgnotify"
	"github.com/printpod/pod/internal/secretbox"
	"github.com/printpod/pod/schemas"
	"github.com/spf13/cobra"
)

// Resealing: after a new key was put first in POD_WEBHOOK_SECRET_KEY,
// `webhooks reseal` seals every stored webhook secret again with it, so the
// old key can leave the list. Each webhook's new sealing goes through the
// webhook decider as a reseal command, a compare-and-set on the sealed
// value read: a client's rotation decided in between wins. The command id
// derives from the webhook and the values it replaces, so a rerun after a
// crash sends the same command, which is decided once.

// resealPage is how many webhooks are read at a time.
const resealPage = 100

// resealTries is how often one webhook is resealed when it changed under
// the reseal (a rotation decided in between, by a podsvc still sealing
// with the old key).
const resealTries = 3

func webhooksCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "webhooks", Short: "Maintain every client's webhooks"}
	var (
		dryRun bool
		wait   time.Duration
	)
	reseal := &cobra.Command{
		Use:   "reseal [--dry-run]",
		Short: "Seal every webhook secret again with the first key of POD_WEBHOOK_SECRET_KEY",
		Long: "Reads every webhook and seals again, with the first key of POD_WEBHOOK_SECRET_KEY, each\n" +
			"secret sealed with another key (and the previous secret while it still signs after a\n" +
			"rotation). The plain secrets do not change: clients see nothing. Give the same key list\n" +
			"as podsvc, the new key first, and restart every podsvc with it before (the decider refuses\n" +
			"a sealing it cannot open). Prints the counts as JSON; exits non-zero, naming the webhooks,\n" +
			"when a secret opens with none of the keys. Once it reports nothing resealed and nothing\n" +
			"unreadable, no webhook secret needs the old keys; replies kept for Idempotency-Key\n" +
			"replays need them for 24 hours after the restart.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait <= 0 && !dryRun {
				// Checked before anything is sent: each webhook's command
				// waits for its decision (found by review: one was sent,
				// then the wait of 0 failed the command).
				return fmt.Errorf("--wait must be positive: each webhook's reseal waits for its decision")
			}
			ctx := cmd.Context()
			open := openKafkaEnv
			if dryRun {
				open = openEnv
			}
			e, err := open(ctx)
			if err != nil {
				return err
			}
			defer e.close()
			if e.cfg.WebhookSecretKey == "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "POD_WEBHOOK_SECRET_KEY is not set: using the development key, as podsvc does")
			}
			box, err := e.cfg.SecretBox()
			if err != nil {
				return err
			}
			r := &resealer{pool: e.pool, box: box, wait: wait, log: cmd.ErrOrStderr()}
			if !dryRun {
				l := pgnotify.New(e.pool, logging.New(cmd.ErrOrStderr(), "warn"), webhook.NotifyDecided)
				lctx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { l.Run(lctx); close(done) }()
				defer func() { cancel(); <-done }()
				r.bus = &webhook.Bus{Producer: e.kafka, Pool: e.pool, Notify: l, Naming: e.cfg.Naming()}
			}
			sum, err := r.run(ctx)
			if perr := printJSON(cmd.OutOrStdout(), sum.out(dryRun)); err == nil {
				err = perr
			}
			if err != nil {
				return err
			}
			if len(sum.unreadable) > 0 {
				ids := make([]string, len(sum.unreadable))
				for i, id := range sum.unreadable {
					ids[i] = id.String()
				}
				return fmt.Errorf("%d webhooks have a secret that no key of POD_WEBHOOK_SECRET_KEY opens: %s "+
					"(see the PodWebhookSecretsUnreadable runbook)", len(ids), strings.Join(ids, ", "))
			}
			return nil
		},
	}
	reseal.Flags().BoolVar(&dryRun, "dry-run", false, "only count what would be resealed")
	reseal.Flags().DurationVar(&wait, "wait", 30*time.Second, "wait up to this long for each webhook's decision")
	cmd.AddCommand(reseal)
	return cmd
}

// stale says which of h's secrets are not sealed with the first key: the
// secret, and the previous one while it still signs (after its overlap no
// one opens it again) and opens. A previous secret that opens with no key
// is left as it is (previousLost): the sender signs without it, and a
// reseal cannot help.
func stale(box *secretbox.Box, h *webhook.Webhook, now time.Time) (secret, previous bool) {
	secret = !box.SealedWithFirst(h.Secret)
	previous = h.PreviousSigns(now) && !box.SealedWithFirst(*h.PreviousSecret) && !previousLost(box, h, now)
	return secret, previous
}

// previousLost says whether h's previous secret still signs but opens
// with no key of box (sealed with a key gone, e.g. when the client rotated
// a secret that had become unreadable).
func previousLost(box *secretbox.Box, h *webhook.Webhook, now time.Time) bool {
	if !h.PreviousSigns(now) {
		return false
	}
	_, err := box.Open(*h.PreviousSecret)
	return err != nil
}

// resealCommand opens the secrets of h that stale named and seals them
// with the first key. Its id derives from the webhook and the values it
// replaces. An error is secretbox.ErrOpen when a secret does not open.
func resealCommand(box *secretbox.Box, h *webhook.Webhook, secret, previous bool) (webhook.Command, error) {
	c := webhook.Command{Kind: webhook.KindReseal, AccountID: h.AccountID, WebhookID: h.ID}
	again := func(sealed string) (string, error) {
		plain, err := box.Open(sealed)
		if err != nil {
			return "", err
		}
		return box.Seal(plain)
	}
	var err error
	if secret {
		c.OldSecret = h.Secret
		if c.Secret, err = again(h.Secret); err != nil {
			return webhook.Command{}, err
		}
	}
	if previous {
		c.OldPreviousSecret = *h.PreviousSecret
		if c.PreviousSecret, err = again(*h.PreviousSecret); err != nil {
			return webhook.Command{}, err
		}
	}
	c.ID = uuid.NewSHA1(h.ID, []byte("reseal\x00"+c.OldSecret+"\x00"+c.OldPreviousSecret))
	return c, nil
}

// resealer reseals every webhook; with no bus (a dry run) it only counts.
type resealer struct {
	pool *pgxpool.Pool
	box  *secretbox.Box
	bus  *webhook.Bus
	wait time.Duration // for each decision
	log  io.Writer     // progress
}

type resealSummary struct {
	resealed, already, deleted int
	unreadable                 []uuid.UUID
	// previousLost are the webhooks whose previous secret, still signing,
	// opens with no key: left as it is, it only drops the second signature
	// until its overlap ends.
	previousLost []uuid.UUID
}

func (s resealSummary) out(dryRun bool) map[string]any {
	ids := func(l []uuid.UUID) []uuid.UUID {
		if l == nil {
			return []uuid.UUID{}
		}
		return l
	}
	if dryRun {
		return map[string]any{"dry_run": true, "to_reseal": s.resealed, "already": s.already, "unreadable": ids(s.unreadable),
			"previous_unreadable": ids(s.previousLost)}
	}
	return map[string]any{"resealed": s.resealed, "already": s.already, "unreadable": ids(s.unreadable),
		"previous_unreadable": ids(s.previousLost), "deleted": s.deleted}
}

// outcome is what became of one webhook.
type outcome int

const (
	resealed outcome = iota // (in a dry run: would be)
	already
	unreadable
	deleted // meanwhile
)

func (r *resealer) run(ctx context.Context) (resealSummary, error) {
	var sum resealSummary
	var total int
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM webhooks`).Scan(&total); err != nil {
		return sum, err
	}
	verb := "resealed"
	if r.bus == nil {
		verb = "to reseal"
	}
	checked := 0
	progress := func() {
		fmt.Fprintf(r.log, "checked %d of %d webhooks: %d %s, %d already sealed with the first key, %d unreadable\n",
			checked, total, sum.resealed, verb, sum.already, len(sum.unreadable))
	}
	after := uuid.Nil
	for {
		page, err := webhook.Page(ctx, r.pool, after, resealPage)
		if err != nil {
			return sum, err
		}
		for _, h := range page {
			if previousLost(r.box, h, time.Now()) {
				sum.previousLost = append(sum.previousLost, h.ID)
			}
			o, err := r.one(ctx, h)
			if err != nil {
				return sum, fmt.Errorf("webhook %s: %w", h.ID, err)
			}
			switch o {
			case resealed:
				sum.resealed++
			case already:
				sum.already++
			case unreadable:
				sum.unreadable = append(sum.unreadable, h.ID)
			case deleted:
				sum.deleted++
			}
			checked++
		}
		progress()
		if len(page) < resealPage {
			return sum, nil
		}
		after = page[len(page)-1].ID
	}
}

// one reseals one webhook as read, then reads it again: a rotation decided
// in between may have left a secret sealed with another key still.
func (r *resealer) one(ctx context.Context, h *webhook.Webhook) (outcome, error) {
	done := false // a reseal of ours was applied
	for try := 0; ; try++ {
		secret, previous := stale(r.box, h, time.Now())
		if !secret && !previous {
			if done {
				return resealed, nil
			}
			return already, nil
		}
		if try == resealTries {
			return 0, fmt.Errorf("a secret is still not sealed with the first key after %d reseals: "+
				"does every podsvc run with the new key first?", resealTries)
		}
		c, err := resealCommand(r.box, h, secret, previous)
		if errors.Is(err, secretbox.ErrOpen) {
			return unreadable, nil
		}
		if err != nil {
			return 0, err
		}
		if r.bus == nil {
			return resealed, nil
		}
		dec, err := r.bus.Decide(ctx, c, r.wait)
		if errors.Is(err, webhook.ErrUndecided) {
			return 0, fmt.Errorf("%w (is podsvc with the decider role running?)", err)
		}
		if err != nil {
			return 0, err
		}
		switch dec.Code {
		case "":
		case schemas.CodeNotFound:
			return deleted, nil
		default:
			return 0, fmt.Errorf("reseal refused: %s %s", dec.Code, dec.Message)
		}
		id := h.ID
		if h, err = webhook.Get(ctx, r.pool, id); err != nil {
			return 0, err
		}
		if h == nil {
			return deleted, nil
		}
		if c.Secret != "" && h.Secret == c.Secret || c.PreviousSecret != "" && h.PreviousSecret != nil && *h.PreviousSecret == c.PreviousSecret {
			done = true
		}
	}
}
