package delivery

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/internal/rdb"
	"github.com/printpod/pod/schemas"
	"github.com/redis/go-redis/v9"
)

// FailureLimit is how many failed deliveries in a row disable a webhook.
const FailureLimit = 10

// Streaks counts each webhook's failed deliveries in a row in Redis, per
// activation generation (a re-activated webhook starts from 0). Without
// Redis, streaks degrade: failures are not counted and nothing is disabled,
// while deliveries go on.
type Streaks struct {
	Redis  *redis.Client
	Prefix string
	Log    *slog.Logger
}

func (s *Streaks) key(id uuid.UUID, gen int) string {
	return s.Prefix + "wh:streak:" + id.String() + ":" + strconv.Itoa(gen)
}

// countedKey names the set of the deliveries (delivery id and run) a
// streak has counted.
func (s *Streaks) countedKey(streak string) string { return streak + ":counted" }

// countFailure adds a failed delivery (ARGV[1]) to a streak (KEYS[1]) once:
// a delivery's failure recorded again (its sender stopped before the
// record of it was committed, or its retries ran twice) counts once.
var countFailure = redis.NewScript(`if redis.call("SADD", KEYS[2], ARGV[1]) == 1 then
	redis.call("INCR", KEYS[1])
end
redis.call("EXPIRE", KEYS[1], ARGV[2])
redis.call("EXPIRE", KEYS[2], ARGV[2])
return tonumber(redis.call("GET", KEYS[1]) or "0")`)

// streakTTL is how long a streak with no new failure is kept.
const streakTTL = 90 * 24 * time.Hour

// Fail counts run of delivery, failed, in the streak of the webhook's
// generation, once however often it is counted, and returns the streak (0
// when Redis is unavailable).
func (s *Streaks) Fail(ctx context.Context, id uuid.UUID, gen int, delivery uuid.UUID, run int) int {
	k := s.key(id, gen)
	n, err := countFailure.Run(ctx, s.Redis, []string{k, s.countedKey(k)},
		delivery.String()+":"+strconv.Itoa(run), int(streakTTL/time.Second)).Int()
	if err != nil {
		s.Log.Warn("failure streak not counted (Redis unavailable)", "webhook", id, "err", err)
		return 0
	}
	return n
}

// Reset ends the streak (a webhook reactivated by its client).
func (s *Streaks) Reset(ctx context.Context, id uuid.UUID, gen int) {
	if err := s.ResetWith(ctx, s.Redis, id, gen).Err(); err != nil {
		s.Log.Warn("failure streak not reset (Redis unavailable)", "webhook", id, "err", err)
	}
}

// ResetWith ends the streak after a successful delivery through r (the
// sender's pipelined client), returning the command, whose result may be
// read later.
func (s *Streaks) ResetWith(ctx context.Context, r redis.Cmdable, id uuid.UUID, gen int) redis.Cmder {
	k := s.key(id, gen)
	return r.Del(ctx, k, s.countedKey(k))
}

// Counts reads the streaks of several webhooks at once (by position).
func (s *Streaks) Counts(ctx context.Context, ids []uuid.UUID, gens []int) ([]int, error) {
	out := make([]int, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	keys := make([]string, len(ids))
	for i := range ids {
		keys[i] = s.key(ids[i], gens[i])
	}
	vals, err := s.Redis.MGet(ctx, keys...).Result()
	if err != nil {
		return out, err
	}
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[i], _ = strconv.Atoi(str)
		}
	}
	return out, nil
}

// DoneMarks remember, per (delivery, run, attempt) and for IDTTL, which
// delivery tasks are worked, so a task read twice is attempted once: a
// record read again after a crash or a rebalance, or the same task put on
// the log twice (a fan-out batch redone after a crash, a deferral redone).
//
// Before its attempt a record claims its task; the claim names the record
// (topic, partition, offset). After the outcome is recorded the mark says
// done. So a record finds one of three things: no mark, or its own claim
// (its earlier attempt was never recorded: work it); done (skip it); or
// another record's claim (skip it: that record is worked until its outcome
// is recorded, read again by the partition's next owner if need be).
// Without Redis every record is worked: delivery stays at least once.
//
// Redis is best an asynchronous automatic pipeline (go-redis's
// AsyncAutoPipeline): the marks of every delivery in flight share round
// trips. A claim is one SET ... NX GET, which needs Redis 7.
type DoneMarks struct {
	Redis  redis.Cmdable
	Prefix string
	Log    *slog.Logger // claims that fail, at most one warning per ClaimWarnEvery

	lastWarn atomic.Int64 // unix nanos of the last warning
}

// ClaimWarnEvery spaces the warnings of failing claims.
const ClaimWarnEvery = 10 * time.Second

// IDTTL is how long a worked task is remembered.
const IDTTL = 15 * time.Minute

// markDone is the mark of a task whose outcome is recorded.
const markDone = "done"

// key names a task's mark: a delivery's attempt in its run, for the
// webhook generation the fan-out saw. A fan-out redone after its webhook
// was disabled and enabled again emits the delivery's task again for the
// new generation; the first try's copy (cancelled, its generation gone)
// must not take the claim of the task the committed batch asked for.
func (m *DoneMarks) key(t schemas.DeliveryTask) string {
	return m.Prefix + "wh:task:" + t.DeliveryID.String() + ":" + strconv.Itoa(t.Run) + ":" + strconv.Itoa(t.Attempt) + ":" + strconv.Itoa(t.Gen)
}

// recordMark names the record at offset of topic's partition in a claim.
func recordMark(topic string, partition int32, offset int64) string {
	return topic + "/" + strconv.Itoa(int(partition)) + "/" + strconv.FormatInt(offset, 10)
}

// Claim reports whether the record at offset should attempt its task t: it
// claims the task when no record has, and answers true for the claimant.
// again says the record held the claim before (it is read again, or its
// deferral reserved the task): Done then keeps the claim's time to live.
func (m *DoneMarks) Claim(ctx context.Context, topic string, partition int32, offset int64, t schemas.DeliveryTask) (attempt, again bool) {
	me := recordMark(topic, partition, offset)
	held, err := m.Redis.SetArgs(ctx, m.key(t), me, redis.SetArgs{Mode: "NX", Get: true, TTL: IDTTL}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return true, false // no mark was there: claimed now
	case err != nil:
		// No Redis, or one older than 7: every record is worked, and a task
		// read twice is attempted twice.
		if now := time.Now().UnixNano(); m.Log != nil && now-m.lastWarn.Load() > int64(ClaimWarnEvery) {
			m.lastWarn.Store(now)
			m.Log.Warn("claiming delivery tasks failed; attempting them unclaimed (Redis unavailable, or older than 7)", "err", err)
		}
		return true, false
	}
	return held == me, held == me
}

// moveClaim hands a task's claim from one record to another, and only if
// the first holds it.
var moveClaim = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("SET", KEYS[1], ARGV[2], "KEEPTTL")
end
return false`)

// Move hands t's claim, if the record at offset of topic's partition holds
// it, to the record at toOffset of toTopic's partition: a task deferred to
// a retry tier (never attempted by this record, but perhaps claimed by its
// earlier reading, whose attempt was cut short) is then attempted by its
// copy on the tier, which would otherwise find another record's claim and
// skip it. A claim held by another record, or done, stays.
func (m *DoneMarks) Move(ctx context.Context, t schemas.DeliveryTask, topic string, partition int32, offset int64,
	toTopic string, toPartition int32, toOffset int64) error {
	err := moveClaim.Run(ctx, m.Redis, []string{m.key(t)},
		recordMark(topic, partition, offset), recordMark(toTopic, toPartition, toOffset)).Err()
	if errors.Is(err, redis.Nil) {
		return nil // not this record's claim
	}
	return err
}

// Release gives up t's claim if the record at offset of topic's partition
// holds it: its task was dead-lettered unattempted (its attempt panicked),
// and the dead letter redriven within IDTTL must find the task unclaimed,
// or it would skip the attempt that was never made.
func (m *DoneMarks) Release(ctx context.Context, t schemas.DeliveryTask, topic string, partition int32, offset int64) error {
	_, err := rdb.DeleteIfHolds(ctx, m.Redis, m.key(t), recordMark(topic, partition, offset))
	return err
}

// markDoneKeeping sets a task's mark (KEYS[1]) done for as long as its
// claim was to last, and at least ARGV[1] milliseconds (that of a deferred
// task lasts until past its copy's due time).
var markDoneKeeping = redis.NewScript(`if redis.call("PTTL", KEYS[1]) > tonumber(ARGV[1]) then
	redis.call("SET", KEYS[1], ARGV[2], "KEEPTTL")
else
	redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[1])
end
return 1`)

// Done marks t done once its outcome is recorded, for IDTTL, or as long
// as its claim was to last when longer and the claim was held before this
// reading's (again, from Claim: a deferral reserved it).
func (m *DoneMarks) Done(ctx context.Context, t schemas.DeliveryTask, again bool) error {
	if again {
		return markDoneKeeping.Run(ctx, m.Redis, []string{m.key(t)}, IDTTL.Milliseconds(), markDone).Err()
	}
	return m.Redis.Set(ctx, m.key(t), markDone, IDTTL).Err()
}

// reserveClaim claims a task (KEYS[1]) for a record (ARGV[1]) that is
// about to defer it, for ARGV[2] milliseconds, or lengthens the record's
// own claim to that; 0 when another record holds it or it is done.
var reserveClaim = redis.NewScript(`local held = redis.call("GET", KEYS[1])
if not held then
	redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
	return 1
end
if held ~= ARGV[1] then
	return 0
end
if redis.call("PTTL", KEYS[1]) < tonumber(ARGV[2]) then
	redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 1`)

// Reserve claims t for the record at offset of topic's partition, which
// is about to defer it to a copy that comes due after wait, until IDTTL
// past that (Move then hands the claim to the copy, time to live and all).
// Should the deferral be cut short before the claim moves, the record is
// read again and works or defers t itself, finding its own claim, and its
// mark (kept by Done) still stands when the copy comes due: the copy skips
// the task. It reports false when another record holds t's claim, or t is
// done: the record need not defer it. Without Redis it reports true: the
// task is deferred.
func (m *DoneMarks) Reserve(ctx context.Context, t schemas.DeliveryTask, topic string, partition int32, offset int64, wait time.Duration) (bool, error) {
	n, err := reserveClaim.Run(ctx, m.Redis, []string{m.key(t)}, recordMark(topic, partition, offset), (wait + IDTTL).Milliseconds()).Int()
	if err != nil {
		return true, err
	}
	return n == 1, nil
}
