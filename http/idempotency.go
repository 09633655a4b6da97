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
	"github.com/printpod/pod/internal/codec"
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
func idempotency(rdb *redis.Client, prefix string, wait time.Duration, box *secretbox.Box, log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) error {
		// checkFraming has held the key to its rules already.
		key := c.Get("Idempotency-Key")
		if c.Method() != fiber.MethodPost || key == "" {
			return c.Next()
		}
		if rdb == nil {
			return Unavailable("the idempotency store (Redis)")
		}
		sum := sha256.Sum256(append([]byte(c.Method()+" "+c.Path()+"\n"), c.Body()...))
		digest := hex.EncodeToString(sum[:])
		rkey := prefix + "idem:" + accountOf(c).String() + ":" + key
		ctx := c.UserContext()
		pending, _ := codec.Marshal(stored{State: "pending", Digest: digest})

		// answer, once set, ends the request without running it: a replay
		// of the kept response or a refusal.
		var answer func() error
		claim := func(ctx context.Context) (bool, error) {
			for range 3 { // a key released or expired in between is tried again at once
				// A pending marker lives briefly: a process that died
				// mid-request does not block the key for a day.
				ok, err := rdb.SetNX(ctx, rkey, pending, 2*time.Minute).Result()
				if err != nil && ctx.Err() != nil {
					return false, ctx.Err() // the wait's time is up, not Redis
				}
				if err != nil {
					log.WarnContext(ctx, "idempotency store unavailable", "err", err)
					answer = func() error { return Unavailable("the idempotency store (Redis)") }
					return true, nil
				}
				if ok {
					return true, nil
				}
				raw, err := rdb.Get(ctx, rkey).Bytes()
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
					rdb.Del(ctx, rkey)
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
				return false, nil // the first request still runs
			}
			return false, nil
		}
		if done, _ := claim(ctx); !done {
			// Another request holds the key: wait, woken by its end.
			if err := awaitKey(ctx, rdb, rkey, wait, claim); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return &Error{Code: schemas.CodeIdempotencyInUse, RetryAfter: 1,
					Message: "a request with this Idempotency-Key is still being processed; repeat it shortly"}
			}
		}
		if answer != nil {
			return answer()
		}
		skey := prefix + "idemseed:" + accountOf(c).String() + ":" + key
		seed, sent, err := commandSeed(ctx, rdb, skey, digest)
		if err != nil {
			rdb.Del(ctx, rkey)
			rdb.Publish(ctx, keyDone(rkey), "released")
			return err
		}
		c.Locals(localSeed, seed)
		c.Locals(localSent, sent)

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
				rdb.SetArgs(bg, skey, digest+" "+seed.String()+" "+seedSent, redis.SetArgs{Mode: "XX", KeepTTL: true})
			}
			rdb.Del(bg, rkey)
			rdb.Publish(bg, keyDone(rkey), "released")
			return nil
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
		if err := rdb.Set(bg, rkey, done, IdempotencyWindow).Err(); err != nil {
			log.WarnContext(bg, "idempotent response not stored", "err", err)
		}
		rdb.Publish(bg, keyDone(rkey), "done")
		return nil
	}
}

// commandSeed is the seed of the ids of the commands a keyed POST sends
// (commandID), kept beside the key for the window from its first run:
// random, so a key used again after the window makes new commands, and
// kept with the request's digest, so a repeat after an answer that was
// not kept (a 5xx, a process that died mid-request) sends the same
// commands again, which are decided once. Another body under the key is
// refused, as it is while the answer is kept.
//
// sent reports that an earlier request's command went on the log and was
// not decided then (its 503 said so, and the seed was marked seedSent):
// the repeat waits for that decision rather than checking the request
// again against what may have changed since.
func commandSeed(ctx context.Context, rdb *redis.Client, skey, digest string) (seed uuid.UUID, sent bool, err error) {
	seed = uuid.New()
	prev, err := rdb.SetArgs(ctx, skey, digest+" "+seed.String(), redis.SetArgs{Mode: "NX", Get: true, TTL: IdempotencyWindow}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return seed, false, nil
	case err != nil:
		return uuid.Nil, false, Unavailable("the idempotency store (Redis)")
	}
	fields := strings.Fields(prev)
	if len(fields) < 2 || fields[0] != digest {
		return uuid.Nil, false, keyReused()
	}
	seed, err = uuid.Parse(fields[1])
	return seed, len(fields) > 2 && fields[2] == seedSent, err
}

// seedSent marks a command seed whose request's command is on the log.
const seedSent = "sent"

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
func awaitKey(ctx context.Context, rdb *redis.Client, rkey string, limit time.Duration, claim func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	sub := rdb.Subscribe(ctx, keyDone(rkey))
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
