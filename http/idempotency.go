package http

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/rdb"
	"github.com/printpod/pod/internal/secretbox"
	"github.com/printpod/pod/internal/wait"
	"github.com/printpod/pod/schemas"
	"github.com/redis/go-redis/v9"
)

// IdempotencyWindow is how long a POST's response is kept for replay.
const IdempotencyWindow = 24 * time.Hour

// stored is a finished response kept for replay.
type stored struct {
	State  string `json:"state"` // "pending" or "done"
	Digest string `json:"digest"`
	// Owner tells one pending request from another: a request finding its
	// own marker (its SETNX retried after a lost reply) holds the key, and
	// one ends or replaces only its own.
	Owner  string `json:"owner,omitempty"`
	Status int    `json:"status,omitempty"`
	Body   []byte `json:"body,omitempty"`
	// Sealed holds the body instead, encrypted, when it may carry a
	// webhook signing secret.
	Sealed string `json:"sealed,omitempty"`
}

// idempotency makes a POST with an Idempotency-Key header replay its first
// response byte for byte for 24 h. The same key with another body (or
// path) is 422 IDEMPOTENCY_KEY_REUSED; a request arriving while the first
// is still running waits for it. 5xx answers are not kept, so the client
// can try again with the same key. With a box, kept bodies are sealed
// (webhook answers carry signing secrets, which are never stored in clear).
func idempotency(redisClient *redis.Client, pool *pgxpool.Pool, prefix string, wait time.Duration, box *secretbox.Box, log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) error {
		// checkFraming has held the key to its rules already.
		key := c.Get("Idempotency-Key")
		if c.Method() != fiber.MethodPost || key == "" {
			return c.Next()
		}
		if redisClient == nil || pool == nil {
			return Unavailable("the idempotency store (Redis)")
		}
		sum := sha256.Sum256(append([]byte(c.Method()+" "+c.Path()+"\n"), c.Body()...))
		digest := hex.EncodeToString(sum[:])
		rkey := prefix + "idem:" + accountOf(c).String() + ":" + key
		ctx := c.UserContext()
		marker, _ := codec.Marshal(stored{State: "pending", Digest: digest, Owner: uuid.NewString()})
		pending := string(marker)
		// release gives the key up, if this request still holds it, whether
		// or not the request's own context has ended.
		release := func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if _, err := rdb.DeleteIfHolds(ctx, redisClient, rkey, pending); err != nil {
				log.WarnContext(ctx, "idempotency key not released", "err", err)
			}
			redisClient.Publish(ctx, keyDone(rkey), "released")
		}

		// answer, once set, ends the request without running it: a replay
		// of the kept response or a refusal.
		var answer func() error
		claim := func(ctx context.Context) (bool, error) {
			for range 3 { // a key released or expired in between is tried again at once
				// A pending marker lives briefly: a process that died
				// mid-request does not block the key for a day.
				ok, err := redisClient.SetNX(ctx, rkey, pending, 2*time.Minute).Result()
				if err != nil && ctx.Err() != nil {
					release(ctx)            // it may have been applied, its reply cut off
					return false, ctx.Err() // the wait's time is up, not Redis
				}
				if err != nil {
					log.WarnContext(ctx, "idempotency store unavailable", "err", err)
					// The SETNX may have been applied with its reply lost:
					// the marker would block the key for its 2 minutes.
					release(ctx)
					answer = func() error { return Unavailable("the idempotency store (Redis)") }
					return true, nil
				}
				if ok {
					return true, nil
				}
				raw, err := redisClient.Get(ctx, rkey).Bytes()
				if errors.Is(err, redis.Nil) {
					continue
				}
				if err != nil && ctx.Err() != nil {
					return false, ctx.Err()
				}
				if err != nil {
					answer = func() error { return Unavailable("the idempotency store (Redis)") }
					return true, nil
				}
				var prev stored
				if codec.Unmarshal(raw, &prev) != nil {
					redisClient.Del(ctx, rkey)
					continue
				}
				if prev.Digest != digest {
					answer = keyReused
					return true, nil
				}
				if prev.State == "done" {
					answer = func() error { return replay(c, box, prev) }
					return true, nil
				}
				if string(raw) == pending {
					return true, nil // its own: the SETNX was retried after a lost reply
				}
				return false, nil // the first request still runs
			}
			return false, nil
		}
		if done, _ := claim(ctx); !done {
			// Another request holds the key: wait, woken by its end.
			if err := awaitKey(ctx, redisClient, rkey, wait, claim); err != nil {
				switch {
				case ctx.Err() != nil:
					return ctx.Err()
				case !errors.Is(err, context.DeadlineExceeded):
					log.WarnContext(ctx, "idempotency store unavailable", "err", err)
					return Unavailable("the idempotency store (Redis)")
				}
				return &Error{Code: schemas.CodeIdempotencyInUse, RetryAfter: 1,
					Message: "a request with this Idempotency-Key is still being processed; repeat it shortly"}
			}
		}
		if answer != nil {
			return answer()
		}
		// The key is this request's from here: every way out, a panic
		// included, stores its answer or gives the key up.
		kept := false
		defer func() {
			if !kept {
				release(ctx)
			}
		}()
		legacy := prefix + "idemseed:" + accountOf(c).String() + ":" + key
		seed, sent, repeat, err := commandSeed(ctx, pool, redisClient, accountOf(c), key, legacy, digest)
		if err != nil {
			return err
		}
		c.Locals(localSeed, seed)
		c.Locals(localSent, sent)
		c.Locals(localRepeat, repeat)

		err = c.Next()
		if err != nil {
			// Render the error now, so the stored bytes are what was sent.
			if herr := c.App().ErrorHandler(c, err); herr != nil {
				return herr
			}
		}
		status := c.Response().StatusCode()
		bg, cancel := context.WithTimeout(context.WithoutCancel(c.UserContext()), 2*time.Second)
		defer cancel()
		if status >= 500 {
			if e := (*Error)(nil); errors.As(err, &e) && e.recorded && !sent {
				if _, err := pool.Exec(bg, `UPDATE idempotency_seeds SET sent = true WHERE account_id = $1 AND key = $2 AND seed = $3`,
					accountOf(c), key, seed); err != nil {
					log.WarnContext(bg, "idempotency seed not marked sent", "err", err)
				}
			}
			return nil // not kept: the key is given up
		}
		keep := stored{State: "done", Digest: digest, Status: status, Body: append([]byte(nil), c.Response().Body()...)}
		if box != nil {
			sealed, err := box.Seal(string(keep.Body))
			if err != nil {
				return err
			}
			keep.Body, keep.Sealed = nil, sealed
		}
		done, _ := codec.Marshal(keep)
		// Kept only over this request's own marker (or none): one that
		// outlived its marker leaves the key to the request that took it.
		if _, err := rdb.SetIfHolds(bg, redisClient, rkey, pending, string(done), IdempotencyWindow); err != nil {
			log.WarnContext(bg, "idempotent response not stored", "err", err)
			return nil // given up: a repeat runs again, under the same commands
		}
		kept = true
		redisClient.Publish(bg, keyDone(rkey), "done")
		return nil
	}
}

// commandSeed is the seed of the ids of the commands a keyed POST sends
// (commandID), kept in Postgres (idempotency_seeds) for the key's window
// from its first run: random, so a key used again after the window makes
// new commands, and kept with the request's digest, so a repeat after an
// answer that was not kept (a 5xx, a process that died mid-request, Redis
// losing the kept answer) sends the same commands again, which are
// decided once. Another body under the key is refused, as it is while the
// answer is kept.
//
// sent reports that an earlier request's command went on the log and was
// not decided then (its 503 said so, and the seed was marked sent): the
// repeat waits for that decision rather than checking the request again
// against what may have changed since. repeat reports that the seed was
// kept from an earlier request under the key, whose command may be on the
// log though it was not marked sent (its process died mid-request): the
// repeat looks for that command's decision once the decider has read the
// log that far (order.CreateInput.MaybeSent).
//
// The previous release kept seeds in Redis (legacy): a key first used
// under it keeps that seed, and its body.
func commandSeed(ctx context.Context, pool *pgxpool.Pool, redisClient *redis.Client, account uuid.UUID, key, legacy, digest string) (seed uuid.UUID, sent, repeat bool, err error) {
	seed = uuid.New()
	fresh := seed
	if prev, err := redisClient.Get(ctx, legacy).Result(); err == nil {
		f := strings.Fields(prev)
		if len(f) >= 2 && f[0] != digest {
			return uuid.Nil, false, false, keyReused()
		}
		if len(f) >= 2 {
			if s, err := uuid.Parse(f[1]); err == nil {
				seed, sent = s, len(f) > 2 && f[2] == "sent"
			}
		}
	}
	for range 3 { // a first use of the key committed while this statement ran: read it
		var kept string
		err = pool.QueryRow(ctx, claimSeed, account, key, digest, seed, sent, IdempotencyWindow.String()).Scan(&kept, &seed, &sent)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue
		case err != nil:
			return uuid.Nil, false, false, Unavailable("the idempotency store (Postgres)")
		case kept != digest:
			return uuid.Nil, false, false, keyReused()
		}
		return seed, sent, seed != fresh, nil
	}
	return uuid.Nil, false, false, Unavailable("the idempotency store (Postgres)")
}

// claimSeed keeps a new seed for a key, or one past its window ($6), and
// answers the key's seed: the new one, else the one kept (read in the
// statement's snapshot: a first use committed since reads as no row).
const claimSeed = `WITH fresh AS (
		INSERT INTO idempotency_seeds AS s (account_id, key, digest, seed, sent) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (account_id, key) DO UPDATE SET digest = excluded.digest, seed = excluded.seed, sent = excluded.sent, created_at = now()
		WHERE s.created_at < now() - $6::interval
		RETURNING digest, seed, sent)
	SELECT digest, seed, sent FROM fresh
	UNION ALL
	SELECT digest, seed, sent FROM idempotency_seeds WHERE account_id = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM fresh)`

// PruneIdempotencySeeds drops the seeds past their window.
func PruneIdempotencySeeds(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `DELETE FROM idempotency_seeds WHERE created_at < now() - $1::interval`, IdempotencyWindow.String())
	return err
}

// keyReused refuses a request whose Idempotency-Key came with another body.
func keyReused() error {
	return &Error{Code: schemas.CodeIdempotencyReused,
		Message: "this Idempotency-Key was used with a different request body; use a new key for a new request",
		Details: map[string]any{"field": "Idempotency-Key"}}
}

// keyDone is the Redis channel on which a request announces that it is
// done with an Idempotency-Key (its response kept, or the key released).
func keyDone(rkey string) string { return rkey + ":done" }

// awaitKey waits up to limit for claim to settle the key, woken when the
// request holding it announces its end (and at least every second).
func awaitKey(ctx context.Context, redisClient *redis.Client, rkey string, limit time.Duration, claim func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	sub := redisClient.Subscribe(ctx, keyDone(rkey))
	defer sub.Close()
	// Subscribed before the next look, so an end announced after it
	// cannot be missed.
	if _, err := sub.Receive(ctx); err != nil {
		return err
	}
	wake := make(chan struct{}, 1)
	go func() {
		for range sub.Channel() {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	return wait.Until(ctx, wake, time.Second, true, claim)
}

// replay answers with a kept response, byte for byte.
func replay(c *fiber.Ctx, box *secretbox.Box, prev stored) error {
	if prev.Sealed != "" {
		body, err := box.Open(prev.Sealed)
		if err != nil {
			return fmt.Errorf("open kept response: %w", err)
		}
		prev.Body = []byte(body)
	}
	c.Set("Idempotent-Replayed", "true")
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(prev.Status).Send(prev.Body)
}
