package delivery

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
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

// Fail counts a failed delivery and returns the streak (0 when Redis is
// unavailable).
func (s *Streaks) Fail(ctx context.Context, id uuid.UUID, gen int) int {
	k := s.key(id, gen)
	pipe := s.Redis.TxPipeline()
	incr := pipe.Incr(ctx, k)
	pipe.Expire(ctx, k, 90*24*time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		s.Log.Warn("failure streak not counted (Redis unavailable)", "webhook", id, "err", err)
		return 0
	}
	return int(incr.Val())
}

// ClaimDisable reports whether the caller is the one to disable the webhook
// for this activation generation: of every failure that reaches the limit,
// only the first claims it. A claimer that could not send the disable
// command gives the claim back (ReleaseDisable) so a later failure tries.
func (s *Streaks) ClaimDisable(ctx context.Context, id uuid.UUID, gen int) bool {
	ok, err := s.Redis.SetNX(ctx, s.key(id, gen)+":disable", 1, 90*24*time.Hour).Result()
	if err != nil {
		s.Log.Warn("auto-disable not claimed (Redis unavailable)", "webhook", id, "err", err)
		return false
	}
	return ok
}

// ReleaseDisable gives a claim back.
func (s *Streaks) ReleaseDisable(ctx context.Context, id uuid.UUID, gen int) {
	if err := s.Redis.Del(ctx, s.key(id, gen)+":disable").Err(); err != nil {
		s.Log.Warn("auto-disable claim not released (Redis unavailable)", "webhook", id, "err", err)
	}
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
	return r.Del(ctx, s.key(id, gen))
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

// DoneMarks remember which delivery tasks were worked, two ways. Per
// partition of the delivery topics, the offsets worked after the last
// committed one: a sender reading such a record again (after a crash or a
// rebalance) skips it instead of making the attempt and scheduling its
// retry a second time; marks below a committed offset are forgotten. And
// per (delivery, run, attempt), for IDTTL: the same task put on the log
// twice (a fan-out batch redone after a crash) is attempted once. Without
// Redis every record is worked: delivery stays at least once.
//
// Redis is best an asynchronous automatic pipeline (go-redis's
// AsyncAutoPipeline): a call issues its commands together and then waits,
// so the marks of every delivery in flight share round trips.
type DoneMarks struct {
	Redis  redis.Cmdable
	Prefix string
}

// IDTTL is how long a worked task is remembered by id.
const IDTTL = 15 * time.Minute

func (m *DoneMarks) key(topic string, partition int32) string {
	return m.Prefix + "wh:done:" + topic + ":" + strconv.Itoa(int(partition))
}

func (m *DoneMarks) idKey(t schemas.DeliveryTask) string {
	return m.Prefix + "wh:did:" + t.DeliveryID.String() + ":" + strconv.Itoa(t.Run) + ":" + strconv.Itoa(t.Attempt)
}

// Done reports whether the record at offset, or the same task, was worked.
func (m *DoneMarks) Done(ctx context.Context, topic string, partition int32, offset int64, t schemas.DeliveryTask) bool {
	score := m.Redis.ZScore(ctx, m.key(topic, partition), strconv.FormatInt(offset, 10))
	seen := m.Redis.Exists(ctx, m.idKey(t))
	return score.Err() == nil || seen.Val() > 0
}

// Mark records that the record at offset was worked and its task
// attempted. It reports whether Redis took both.
func (m *DoneMarks) Mark(ctx context.Context, topic string, partition int32, offset int64, task schemas.DeliveryTask) error {
	return firstErr([]redis.Cmder{
		m.Redis.ZAdd(ctx, m.key(topic, partition), redis.Z{Score: float64(offset), Member: strconv.FormatInt(offset, 10)}),
		m.Redis.Set(ctx, m.idKey(task), 1, IDTTL),
	})
}

// MarkOffsets records that the jobs' records were worked.
func (m *DoneMarks) MarkOffsets(ctx context.Context, jobs []job) {
	cmds := make([]redis.Cmder, len(jobs))
	for i, j := range jobs {
		cmds[i] = m.Redis.ZAdd(ctx, m.key(j.tp.topic, j.tp.partition), redis.Z{Score: float64(j.offset), Member: strconv.FormatInt(j.offset, 10)})
	}
	_ = firstErr(cmds)
}

// firstErr waits for cmds and returns the first error.
func firstErr(cmds []redis.Cmder) error {
	var first error
	for _, c := range cmds {
		if err := c.Err(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Forget drops the marks below a committed offset.
func (m *DoneMarks) Forget(ctx context.Context, topic string, partition int32, committed int64) {
	_ = m.Redis.ZRemRangeByScore(ctx, m.key(topic, partition), "-inf", "("+strconv.FormatInt(committed, 10)).Err()
}
