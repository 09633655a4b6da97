package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/schemas"
	"github.com/sethvargo/go-retry"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Handler applies records inside tx and returns the records the stage
// emits (events, tasks, commands), or none. It sees only records not
// applied before. The runner produces what it returns, and only then
// commits tx: the one publishing rule of every stage. Emitted records must
// be a deterministic function of the stage's state and its input (ids
// derived from what caused them), so a batch redone after a crash emits
// the same records, which consumers take once by id.
type Handler func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error)

// Consumer describes one consumer: its name is the key of its stored
// offsets and, with the Runner's group prefix (Naming.Group), its Kafka
// group, so it is chosen once.
type Consumer struct {
	Name     string
	Topics   []string // cluster names (schemas.Naming.Topic)
	Handle   Handler
	MaxBatch int // records per batch; default 1000
	// Linger gathers a batch: once a poll returns records, the consumer
	// polls on for up to Linger, until the batch holds LingerBatch records
	// (MaxBatch when 0). Each batch costs a transaction and its round trips
	// whatever its size, so a stage fed a few records at a time pays them
	// for every few records. Unset, it is BriefLinger up to
	// BriefLingerBatch records (whatever LingerBatch says), and only while
	// the stage takes 200 records a second or more (one per BriefLinger):
	// under load a poll returns that many at once and nothing waits; at a
	// few hundred orders a second a batch gathers the records of a few
	// milliseconds; at a few orders a second nothing lingers. A stage
	// whose writes merge when related records meet in one batch lingers
	// longer, delaying its output by as much, so only stages nobody waits
	// on do. Negative: no linger.
	Linger      time.Duration
	LingerBatch int
	brief       bool // Linger is BriefLinger by default: only when busy
	// OffsetCheck is how often the consumer compares its stored offsets
	// with what it applied, to find a rewind (an operator's edit) of a
	// partition no record comes to; default 2s. A batch finds the rewind
	// of a partition it has records of.
	OffsetCheck time.Duration
	// DeadLetterAs names the consumer whose dead-letter topic takes this
	// one's dead letters (default: its own, Naming.DeadLetterTopic(Name)):
	// a read model's rebuild dead-letters what its projector does.
	DeadLetterAs string
	// DeadLettered, when set, reports whether the record consumed at a
	// place is in the dead-letter topic already (a rebuild reading what
	// its projector dead-lettered): one that fails for good again is
	// passed without a second dead letter.
	DeadLettered func(Place) bool
	// OnDeadLetter, when set, runs in the transaction that moves the
	// consumer past a record it dead-letters, before the dead letter is
	// produced, inside a savepoint: what it writes commits with that
	// move. A failure retrying may clear is retried as the dead letter
	// is; one that is permanent (IsPermanent) is logged and leaves the
	// dead letter as it is. (A decider records a refusal, which its
	// waiters then learn.)
	OnDeadLetter func(ctx context.Context, tx pgx.Tx, rec *kgo.Record, cause error) error
	// SessionOpts, when set, gives options for each new client: the loop
	// makes a fresh client per group session (after a rewind, an error),
	// and hooks that keep per-client state (kprom) must not be shared
	// between an old client's last callbacks and a new one.
	SessionOpts func() []kgo.Opt
}

// Runner runs consumers against one Postgres pool and broker list.
type Runner struct {
	Pool    *pgxpool.Pool
	Brokers []string
	Log     *slog.Logger
	Metrics *Metrics // optional
	// Naming prefixes the consumers' group ids and names their dead-letter
	// topics.
	Naming schemas.Naming
	// Producer writes what handlers emit and the dead letters
	// (Naming.DeadLetterTopic of the consumer); it must be idempotent and
	// wait for all in-sync replicas (acks=all), as kafka.NewProducer is.
	Producer *kgo.Client
}

// deadLetters is the consumer whose dead-letter topic c writes.
func (c Consumer) deadLetters() string {
	if c.DeadLetterAs != "" {
		return c.DeadLetterAs
	}
	return c.Name
}

var errRejoin = errors.New("stored offsets moved back: rejoin")

// Run consumes until ctx ends. It returns nil on a clean stop.
func (r *Runner) Run(ctx context.Context, c Consumer) error {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1000
	}
	if c.OffsetCheck <= 0 {
		c.OffsetCheck = 2 * time.Second
	}
	if c.Linger == 0 {
		c.Linger, c.LingerBatch, c.brief = BriefLinger, BriefLingerBatch, true
	}
	if c.LingerBatch <= 0 || c.LingerBatch > c.MaxBatch {
		c.LingerBatch = c.MaxBatch
	}
	log := r.Log.With("consumer", c.Name)
	r.Metrics.start(c.Name)
	for {
		err := r.session(ctx, c, log)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errRejoin) {
			log.Info("rejoining", "why", err)
			continue
		}
		if err != nil {
			log.Error("consumer session ended; restarting", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

type tp struct {
	topic     string
	partition int32
}

// session is one membership of the group, from join to leave.
func (r *Runner) session(ctx context.Context, c Consumer, log *slog.Logger) error {
	var mu sync.Mutex
	next := map[tp]int64{} // next offset to apply, per owned partition, as last stored
	forget := func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
		mu.Lock()
		defer mu.Unlock()
		for t, ps := range lost {
			for _, p := range ps {
				delete(next, tp{t, p})
			}
		}
	}
	// franz-go's own revoke, which this one replaces, commits what was
	// marked to the group: the records applied, whose offsets Postgres
	// holds. The group's offsets in Kafka are what the lag metric reads;
	// not committed, a partition handed over (a rebalance, a stop) would
	// show the records applied in its last second as lag until the new
	// owner next applies one there, for good on a quiet partition.
	revoked := func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) {
		if err := cl.CommitMarkedOffsets(ctx); err != nil && ctx.Err() == nil {
			log.Warn("committing the applied offsets to the group failed; its lag reads high until the next commit", "err", err)
		}
		forget(ctx, cl, ps)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(r.Brokers...),
		kgo.ConsumerGroup(r.Naming.Group(c.Name)),
		kgo.ConsumeTopics(c.Topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(250 * time.Millisecond),
		kgo.BlockRebalanceOnPoll(),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.OnPartitionsRevoked(revoked),
		kgo.OnPartitionsLost(forget),
		kgo.AdjustFetchOffsetsFn(func(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			stored, err := loadStored(ctx, r.Pool, c.Name)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			for t, ps := range assigned {
				for p := range ps {
					// No row: start of the log. With the leader epoch of
					// the last record applied, the client first asks where
					// that epoch ends on the log as it is now: a log cut
					// back since is reported (ErrDataLoss, cutBack).
					at, ok := stored[tp{t, p}]
					if !ok {
						at.epoch = -1
					}
					ps[p] = kgo.NewOffset().At(at.next).WithEpoch(at.epoch)
					next[tp{t, p}] = at.next
				}
			}
			return assigned, nil
		}),
	}
	if c.SessionOpts != nil {
		opts = append(opts, c.SessionOpts()...)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", c.Name, err)
	}
	defer cl.Close()

	logs := &logsRead{bounds: logBoundsOf(cl), current: topicIDOf(cl), ids: map[string]uuid.UUID{}}
	apply := r.policies(c, log, logs)
	lastCheck := time.Now()
	var flow arrivals
	for {
		if time.Since(lastCheck) >= c.OffsetCheck {
			lastCheck = time.Now()
			mu.Lock()
			snapshot := maps.Clone(next)
			mu.Unlock()
			if rewound, err := storedBehind(ctx, r.Pool, c.Name, snapshot); err != nil {
				log.Warn("offset check failed", "err", err)
			} else if rewound {
				return errRejoin
			}
		}
		pollCtx, cancel := context.WithTimeout(ctx, c.OffsetCheck)
		fetches := cl.PollRecords(pollCtx, c.MaxBatch)
		cancel()
		if ctx.Err() != nil || fetches.IsClientClosed() {
			cl.AllowRebalance()
			return ctx.Err()
		}
		logs.learn(fetches)
		failure := FetchFailure(fetches, log)
		if errors.Is(failure, ErrTopicMadeAgain) {
			cl.AllowRebalance()
			return failure
		}
		recs := fetches.Records()
		if len(recs) > 0 && c.Linger > 0 && (!c.brief || flow.busy(time.Now())) {
			var closed bool
			recs, closed = linger(ctx, cl, c, logs, recs, log)
			if closed {
				cl.AllowRebalance()
				return ctx.Err()
			}
		}
		if len(logs.lost) > 0 {
			cl.AllowRebalance()
			return r.cutBack(ctx, c, logs)
		}
		flow.add(len(recs), time.Now())
		if len(recs) == 0 {
			cl.AllowRebalance()
			if failure != nil {
				if !AfterFetchFailure(ctx) {
					return ctx.Err()
				}
				continue
			}
			// Nothing to do is progress too: only a consumer stuck on a
			// batch, or whose fetches fail, goes stale.
			r.Metrics.progress(c.Name)
			continue
		}
		_, err := apply(ctx, recs)
		if err != nil {
			cl.AllowRebalance()
			return err
		}
		mu.Lock()
		for _, rec := range recs {
			next[tp{rec.Topic, rec.Partition}] = rec.Offset + 1
		}
		mu.Unlock()
		cl.MarkCommitRecords(recs...)
		cl.AllowRebalance()
	}
}

// BriefLinger and BriefLingerBatch are a stage's linger unless it sets
// its own (Consumer.Linger).
const (
	BriefLinger      = 5 * time.Millisecond
	BriefLingerBatch = 64
)

// arrivals tells how many records a second a consumer takes, counted over
// windows of a second or more (an idle spell ends a window too).
type arrivals struct {
	since time.Time
	n     int
	rate  float64 // records a second over the last window
}

// busy reports whether records arrive fast enough for a brief linger to
// gather more than the poll's: one per BriefLinger or more, on average
// over the last window. Below that (a few orders a second) lingering
// would only add its wait to every hop.
func (a *arrivals) busy(now time.Time) bool {
	a.roll(now)
	return a.rate*BriefLinger.Seconds() >= 1
}

func (a *arrivals) add(n int, now time.Time) {
	a.roll(now)
	a.n += n
}

func (a *arrivals) roll(now time.Time) {
	if a.since.IsZero() {
		a.since = now
		return
	}
	if d := now.Sub(a.since); d >= time.Second {
		a.rate = float64(a.n) / d.Seconds()
		a.n, a.since = 0, now
	}
}

// linger polls on for c.Linger after a batch's first records (recs), until
// the batch holds c.LingerBatch records. It reports whether the client
// closed meanwhile. Rebalances stay blocked while it gathers
// (BlockRebalanceOnPoll), so the batch's partitions stay this member's.
func linger(ctx context.Context, cl *kgo.Client, c Consumer, logs *logsRead, recs []*kgo.Record, log *slog.Logger) ([]*kgo.Record, bool) {
	deadline := time.Now().Add(c.Linger)
	for len(recs) < c.LingerBatch && time.Now().Before(deadline) {
		pollCtx, cancel := context.WithDeadline(ctx, deadline)
		fetches := cl.PollRecords(pollCtx, c.LingerBatch-len(recs))
		cancel()
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return recs, true
		}
		logs.learn(fetches)
		recs = append(recs, fetches.Records()...)
		if FetchFailure(fetches, log) != nil {
			break // the session's next poll sees it
		}
	}
	return recs, false
}

// ErrTopicMadeAgain is what FetchFailure returns when a topic the client
// reads was deleted and made again (UNKNOWN_TOPIC_ID). franz-go keeps the
// id a topic had when the client first read it and fails the new topic for
// good, so the caller ends its session: the next one's new client reads
// the new topic.
var ErrTopicMadeAgain = errors.New("a topic it consumes was deleted and made again")

// FetchFailure logs the errors of a poll, other than its own deadline, and
// returns the first (ErrTopicMadeAgain first), or nil. A poll that brings
// only errors is no progress, and one made at once would fail as fast:
// its caller waits first (AfterFetchFailure).
func FetchFailure(fetches kgo.Fetches, log *slog.Logger) error {
	var failure error
	fetches.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		log.Warn("fetch error", "topic", t, "partition", p, "err", err)
		switch {
		case errors.Is(err, kerr.UnknownTopicID):
			failure = fmt.Errorf("%w: %s/%d: %w", ErrTopicMadeAgain, t, p, err)
		case failure == nil:
			failure = err
		}
	})
	return failure
}

// AfterFetchFailure waits a second after a poll that brought only fetch
// errors, and reports false if ctx ended first.
func AfterFetchFailure(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Second):
		return true
	}
}

// Step applies a batch and returns the records it applied.
type Step func(ctx context.Context, recs []*kgo.Record) ([]*kgo.Record, error)

// Policy wraps a Step with one concern of the runner's.
type Policy func(next Step) Step

// policies is how the runner applies every batch of c: its transaction
// (apply), wrapped, from the inside out, by panic recovery, the batch
// metrics, retry with backoff, and the dead-letter policy. A stage's
// handler knows none of them.
func (r *Runner) policies(c Consumer, log *slog.Logger, logs *logsRead) Step {
	step := Step(func(ctx context.Context, recs []*kgo.Record) ([]*kgo.Record, error) {
		return r.apply(ctx, c, logs, recs)
	})
	for _, p := range []Policy{recovering(c.Name), r.measuring(c.Name), retrying(log), r.isolating(c, log, logs)} {
		step = p(step)
	}
	return step
}

// recovering turns a panic of the step (a handler's bug) into an error
// that counts as permanent, so the dead-letter policy isolates the record
// that causes it; the transaction was rolled back as the panic unwound.
func recovering(consumer string) Policy {
	return func(next Step) Step {
		return func(ctx context.Context, recs []*kgo.Record) (applied []*kgo.Record, err error) {
			defer func() {
				if p := recover(); p != nil {
					applied, err = nil, &panicError{fmt.Sprintf("handler %s panicked: %v", consumer, p)}
				}
			}()
			return next(ctx, recs)
		}
	}
}

// measuring counts each attempt at a batch: its size and time when it
// commits, a failure when it fails (not a rejoin, not shutdown).
func (r *Runner) measuring(consumer string) Policy {
	return func(next Step) Step {
		return func(ctx context.Context, recs []*kgo.Record) ([]*kgo.Record, error) {
			start := time.Now()
			applied, err := next(ctx, recs)
			switch {
			case err == nil:
				r.Metrics.observeBatch(consumer, len(applied), time.Since(start))
			case !errors.Is(err, errRejoin) && ctx.Err() == nil:
				r.Metrics.observeFailure(consumer)
			}
			return applied, err
		}
	}
}

// poisonedBatch is what the retrying policy returns when the batch failed
// permanently PoisonAttempts times (once, for a failure of its content).
type poisonedBatch struct{ err error }

func (e *poisonedBatch) Error() string { return "batch fails permanently: " + e.err.Error() }

// retrying retries a failed batch with capped exponential backoff. It
// gives up when ctx ends, when the stored offsets show the batch must be
// re-read (errRejoin), or when the batch failed permanently (IsPermanent)
// PoisonAttempts times, or once for a failure of its content (isContent)
// (*poisonedBatch). Transient failures are retried
// without end. A batch that started is finished even when shutdown
// begins: only the waits between attempts end with ctx.
func retrying(log *slog.Logger) Policy {
	return func(next Step) Step {
		return func(ctx context.Context, recs []*kgo.Record) ([]*kgo.Record, error) {
			var applied []*kgo.Record
			permanent := 0
			backoff := retry.WithCappedDuration(5*time.Second, retry.NewExponential(50*time.Millisecond))
			err := retry.Do(ctx, backoff, func(ctx context.Context) error {
				applyCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				var err error
				applied, err = next(applyCtx, recs)
				if err == nil || errors.Is(err, errRejoin) || ctx.Err() != nil {
					return err
				}
				if IsPermanent(err) {
					if permanent++; permanent >= PoisonAttempts || isContent(err) {
						return &poisonedBatch{err}
					}
				}
				log.Warn("apply batch failed; retrying", "records", len(recs), "permanent", IsPermanent(err), "err", err)
				return retry.RetryableError(err)
			})
			return applied, err
		}
	}
}

// isolating dead-letters the records that can never be applied. When the
// batch fails permanently (*poisonedBatch), it splits the batch in two and
// applies each half the same way, in order, down to single records: a
// record that fails permanently on its own is dead-lettered and the rest
// go on. Every piece commits its own records with their offsets, so each
// good record is still applied exactly once. It returns the records
// applied (not the dead letters).
func (r *Runner) isolating(c Consumer, log *slog.Logger, logs *logsRead) Policy {
	return func(next Step) Step {
		var isolate Step
		isolate = func(ctx context.Context, recs []*kgo.Record) ([]*kgo.Record, error) {
			applied, err := next(ctx, recs)
			var poisoned *poisonedBatch
			if !errors.As(err, &poisoned) {
				return applied, err
			}
			if len(recs) == 1 {
				return nil, r.deadLetterWithRetry(ctx, c, log, logs, recs[0], poisoned.err)
			}
			log.Warn("batch fails permanently; narrowing it down", "records", len(recs), "err", poisoned.err)
			mid := len(recs) / 2
			first, err := isolate(ctx, recs[:mid])
			if err != nil {
				return first, err
			}
			second, err := isolate(ctx, recs[mid:])
			return append(first, second...), err
		}
		return isolate
	}
}

// deadLetterWithRetry dead-letters rec, retrying (Kafka or Postgres being
// down is transient) until it is done or ctx ends.
func (r *Runner) deadLetterWithRetry(ctx context.Context, c Consumer, log *slog.Logger, logs *logsRead, rec *kgo.Record, cause error) error {
	backoff := retry.WithCappedDuration(5*time.Second, retry.NewExponential(50*time.Millisecond))
	return retry.Do(ctx, backoff, func(ctx context.Context) error {
		dlCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		done, err := r.deadLetter(dlCtx, c, logs, rec, cause)
		if errors.Is(err, errRejoin) || ctx.Err() != nil {
			return err
		}
		if err != nil {
			log.Error("dead-lettering a record failed; retrying", "topic", rec.Topic, "partition", rec.Partition,
				"offset", rec.Offset, "err", err)
			return retry.RetryableError(err)
		}
		if done {
			r.Metrics.observeDeadLetter(c.Name)
			log.Error("record dead-lettered: it cannot be applied", "topic", rec.Topic, "partition", rec.Partition,
				"offset", rec.Offset, "dlq", r.Naming.DeadLetterTopic(c.deadLetters()), "err", cause)
		}
		return nil
	})
}

// apply runs one transaction: claim the offset rows of the batch's
// partitions (lock them and move them past the batch, in one statement),
// drop records already applied, run the handler, produce what it emits,
// commit. The produce comes before the commit and under the offset rows'
// locks, so an emitted record is never lost (a crash before the commit
// redoes the batch, which emits the same records again) and two members
// never emit for one partition at once.
func (r *Runner) apply(ctx context.Context, c Consumer, logs *logsRead, recs []*kgo.Record) (applied []*kgo.Record, err error) {
	tx, err := r.Pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	byTP := map[tp][]*kgo.Record{}
	var keys []tp
	for _, rec := range recs {
		k := tp{rec.Topic, rec.Partition}
		if _, ok := byTP[k]; !ok {
			keys = append(keys, k)
		}
		byTP[k] = append(byTP[k], rec)
	}
	fetched := make([]int64, len(keys))
	epochs := make([]int32, len(keys))
	for i, k := range keys {
		last := byTP[k][len(byTP[k])-1]
		fetched[i], epochs[i] = last.Offset+1, last.LeaderEpoch
	}
	offsets, err := claimOffsets(ctx, tx, c.Name, keys, fetched, epochs, logs.ids)
	if err != nil {
		return nil, err
	}
	var other []tp // partitions whose offsets were stored for another topic id
	for _, k := range keys {
		if logs.other(k.topic, offsets[k]) {
			other = append(other, k)
		}
	}
	if len(other) > 0 {
		return nil, r.madeAgain(ctx, tx, c, logs, other, offsets)
	}
	for _, k := range keys {
		stored := offsets[k].next
		part := byTP[k]
		i := 0
		for i < len(part) && part[i].Offset < stored {
			i++
		}
		if i > 0 {
			if err := r.pastEnd(ctx, tx, c, logs, k, offsets[k]); err != nil {
				return nil, err
			}
		}
		part = part[i:]
		if len(part) > 0 && part[0].Offset > stored {
			if err := r.behind(ctx, c, logs, k, stored, part[0].Offset); err != nil {
				return nil, err
			}
		}
		if len(part) == 0 {
			continue
		}
		applied = append(applied, part...)
	}
	if len(applied) == 0 {
		return nil, nil
	}
	emitted, err := c.Handle(ctx, tx, applied)
	if err != nil {
		return nil, fmt.Errorf("handle %s: %w", c.Name, err)
	}
	if len(emitted) > 0 {
		if r.Producer == nil {
			return nil, errors.New("the stage emits records but the runner has no producer")
		}
		if err := r.fits(emitted); err != nil {
			return nil, Poison(fmt.Errorf("%s emits %w", c.Name, err))
		}
		if err := r.Producer.ProduceSync(ctx, emitted...).FirstErr(); err != nil {
			return nil, fmt.Errorf("produce what %s emits: %w", c.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return applied, nil
}

// fits refuses, before any is produced, records of which one is larger
// than the producer takes (ProducerBatchMaxBytes). Produced together, the
// others would go on the log for a transaction that then rolls back, and
// the batch would not be redone as such (its cause is dead-lettered), so
// they would stand: an event of a decision never stored. Refused as
// poison, the batch is narrowed down to the record that causes it, which
// is dead-lettered with nothing emitted.
func (r *Runner) fits(recs []*kgo.Record) error {
	limit, _ := r.Producer.OptValue(kgo.ProducerBatchMaxBytes).(int32)
	if limit <= 0 {
		return nil
	}
	for _, rec := range recs {
		if n := recordBytes(rec); n > int(limit) {
			return fmt.Errorf("a record of about %d bytes to %s, more than the %d bytes a produce carries", n, rec.Topic, limit)
		}
	}
	return nil
}

// recordBytes bounds from above what rec takes in a record batch of its
// own: the batch's header, the record's length prefixes at their widest,
// its key, value and headers.
func recordBytes(rec *kgo.Record) int {
	n := recordBatchHeader + 6*maxVarint + len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += 2*maxVarint + len(h.Key) + len(h.Value)
	}
	return n
}

const (
	recordBatchHeader = 61 // a record batch's fixed fields, with its length
	maxVarint         = 5  // the widest a length or delta is encoded
)

// claimOffsets locks the offset rows of keys (creating the missing ones
// at 0), moves each forward to its next unless it is already there or
// beyond, and returns the offsets stored before: one statement once the
// rows exist. The rows are locked in key order, so members claiming
// overlapping sets cannot deadlock, and two members (one a zombie) can
// never both pass this point with the same stored offset, even for a
// partition seen for the first time: the second waits for the first to
// commit and then reads the offset it stored. The move takes effect only
// if the transaction commits, so a caller that finds the batch already
// applied, or that must re-read, rolls back and nothing moved.
func claimOffsets(ctx context.Context, tx pgx.Tx, consumer string, keys []tp, next []int64, epochs []int32, ids map[string]uuid.UUID) (map[tp]claimed, error) {
	stored := make(map[tp]claimed, len(keys))
	// The locking read is materialized: read once, before any row moves.
	// Planned as a subquery it could be scanned again after the update
	// moved a row, and a row this statement already updated is not locked
	// (nor returned) a second time.
	claim := func(keys []tp, next []int64, epochs []int32) error {
		topics, parts := keyColumns(keys)
		b := &pgx.Batch{}
		// Planned once per connection: planning this statement each time
		// (the connections' force_custom_plan) cost more than running it,
		// and a table of a few rows per consumer needs no plan fitted to
		// the arguments. The setting returns to the connection's own after
		// the statement, for the handler's.
		b.Queue(`SET LOCAL plan_cache_mode = force_generic_plan`)
		b.Queue(`WITH l AS MATERIALIZED (
				SELECT s.topic, s.partition, s.next_offset, s.topic_id, s.leader_epoch, s.leader_epoch_at, k.next, k.id, nullif(k.epoch, -1) AS epoch FROM consumer_offsets s
				JOIN unnest($2::text[], $3::int[], $4::bigint[], $5::uuid[], $6::int[]) AS k(topic, partition, next, id, epoch) ON s.topic = k.topic AND s.partition = k.partition
				WHERE s.consumer = $1 ORDER BY s.topic, s.partition FOR UPDATE OF s)
			UPDATE consumer_offsets o SET next_offset = GREATEST(l.next_offset, l.next), topic_id = coalesce(l.topic_id, l.id),
				leader_epoch = CASE WHEN l.next <= l.next_offset THEN l.leader_epoch WHEN coalesce(l.topic_id, l.id) IS NOT NULL THEN l.epoch END,
				leader_epoch_at = CASE WHEN l.next <= l.next_offset THEN l.leader_epoch_at ELSE l.next END, updated_at = now()
			FROM l WHERE o.consumer = $1 AND o.topic = l.topic AND o.partition = l.partition
			RETURNING l.topic, l.partition, l.next_offset, l.topic_id`, consumer, topics, parts, next, topicIDs(keys, ids), epochs).Query(func(rows pgx.Rows) error {
			var k tp
			var c claimed
			var id pgtype.UUID
			_, err := pgx.ForEachRow(rows, []any{&k.topic, &k.partition, &c.next, &id}, func() error {
				c.topicID = id.Bytes // zero (uuid.Nil) when NULL
				stored[k] = c
				return nil
			})
			return err
		})
		b.Queue(`RESET plan_cache_mode`)
		return tx.SendBatch(ctx, b).Close()
	}
	err := claim(keys, next, epochs)
	if err == nil && len(stored) < len(keys) {
		// First sight of some partitions: create their rows, then claim
		// those (the others are claimed already).
		var missing []tp
		var missingNext []int64
		var missingEpochs []int32
		for i, k := range keys {
			if _, ok := stored[k]; !ok {
				missing, missingNext, missingEpochs = append(missing, k), append(missingNext, next[i]), append(missingEpochs, epochs[i])
			}
		}
		topics, parts := keyColumns(missing)
		if _, err = tx.Exec(ctx, `INSERT INTO consumer_offsets (consumer, topic, partition, next_offset)
			SELECT $1, topic, partition, 0 FROM unnest($2::text[], $3::int[]) AS k(topic, partition)
			ORDER BY topic, partition ON CONFLICT DO NOTHING`, consumer, topics, parts); err == nil {
			err = claim(missing, missingNext, missingEpochs)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("claim offsets of %s: %w", consumer, err)
	}
	return stored, nil
}

// claimed is what claimOffsets read of a partition's row before it moved
// it: the offset stored, and the id of the topic it was stored for
// (uuid.Nil: not known).
type claimed struct {
	next    int64
	topicID uuid.UUID
}

// topicIDs are the ids of keys' topics, aligned with keys, NULL where not
// known: a claim stores one in a row that has none, and leaves a row's own
// (apply compares them: madeAgain).
func topicIDs(keys []tp, ids map[string]uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(keys))
	for i, k := range keys {
		if id, ok := ids[k.topic]; ok {
			out[i] = pgtype.UUID{Bytes: id, Valid: true}
		}
	}
	return out
}

// keyColumns are keys as the two arrays a statement unnests.
func keyColumns(keys []tp) ([]string, []int32) {
	topics := make([]string, len(keys))
	parts := make([]int32, len(keys))
	for i, k := range keys {
		topics[i], parts[i] = k.topic, k.partition
	}
	return topics, parts
}

// behind decides what to do when the records fetched for k start at first,
// past its stored offset. While the log still holds records in between,
// the consumer re-reads from the stored offset (errRejoin): an edit
// rewound it, or cleared it while this member was fetching further on.
// Only when the records in between are gone (retention deleted them, so
// first is the log's start) does it go on, logging the gap; a stored
// offset before the log's start is reset to the start on the re-read, so
// the next batch is that case.
func (r *Runner) behind(ctx context.Context, c Consumer, logs *logsRead, k tp, stored, first int64) error {
	start, _, err := logs.bounds(ctx, k.topic, k.partition)
	if err != nil {
		return fmt.Errorf("log start of %s/%d: %w", k.topic, k.partition, err)
	}
	if stored >= start || first > start {
		return errRejoin
	}
	r.Log.Warn("records before the log start are gone; continuing", "consumer", c.Name,
		"topic", k.topic, "partition", k.partition, "stored", stored, "log_start", start)
	return nil
}

// pastEnd checks, when records fetched for k are below its stored offset,
// that they are records applied before (a zombie's fetch, a rebuild's
// offsets swapped in) and not those of a log that ends before the stored
// offset. That log lost records applied before (an unclean leader
// election made a replica that lagged its leader the new leader): kept,
// the stored offset would drop everything written to it since as applied,
// with no sign, until the log grew past it again. Its stored offset is
// moved to the log's start instead (only if it is still the one read, in a
// statement of its own once tx is rolled back) and the consumer re-reads
// (errRejoin). The records still there are applied again, which consumers
// take once by id: where the log was cut is not known here, and records
// written since may be below the stored offset. A stored leader epoch lets
// the client find the cut first (cutBack), and a topic made again under
// the same name is found by its id (madeAgain); this is for offsets stored
// with neither.
func (r *Runner) pastEnd(ctx context.Context, tx pgx.Tx, c Consumer, logs *logsRead, k tp, was claimed) error {
	start, end, err := logs.bounds(ctx, k.topic, k.partition)
	if err != nil {
		return fmt.Errorf("log offsets of %s/%d: %w", k.topic, k.partition, err)
	}
	if end >= was.next {
		return nil
	}
	r.Log.Error("a log ends before the offset stored for it: it lost records applied before (an unclean leader election); applying it again from its start",
		"consumer", c.Name, "topic", k.topic, "partition", k.partition, "stored", was.next, "log_start", start, "log_end", end)
	if err := tx.Rollback(ctx); err != nil {
		return fmt.Errorf("roll back: %w", err)
	}
	if err := r.moveStored(ctx, c, k, was, start, -1, uuid.Nil); err != nil {
		return err
	}
	return errRejoin
}

// madeAgain handles the partitions of keys whose offsets were stored for
// another topic id than this session reads (was holds what was stored).
// When the session's ids are the topics' ids now, the topics were deleted
// and made again since: each such offset moves to the new log's start,
// with the new id, however far the new log has grown, and the consumer
// re-reads (errRejoin). When they are not, this member's client
// still reads a topic deleted since (a zombie, or a session begun before
// the change): nothing moves, and the session ends, for the next one's
// client to read the topic as it is now.
func (r *Runner) madeAgain(ctx context.Context, tx pgx.Tx, c Consumer, logs *logsRead, keys []tp, was map[tp]claimed) error {
	if err := tx.Rollback(ctx); err != nil {
		return fmt.Errorf("roll back: %w", err)
	}
	now := map[string]uuid.UUID{}
	for _, k := range keys {
		if _, ok := now[k.topic]; ok {
			continue
		}
		id, err := logs.current(ctx, k.topic)
		if err != nil {
			return fmt.Errorf("the id of %s: %w", k.topic, err)
		}
		if now[k.topic] = id; id != logs.ids[k.topic] {
			return fmt.Errorf("%w: this session reads %s as topic id %s, deleted since (now %s)", errRejoin, k.topic, logs.ids[k.topic], id)
		}
	}
	for _, k := range keys {
		if err := r.toNewLog(ctx, c, logs, k, was[k], now[k.topic]); err != nil {
			return err
		}
	}
	return errRejoin
}

// toNewLog moves the stored offset of k, stored for another topic than id
// (was), to the start of the log of topic id.
func (r *Runner) toNewLog(ctx context.Context, c Consumer, logs *logsRead, k tp, was claimed, id uuid.UUID) error {
	start, _, err := logs.bounds(ctx, k.topic, k.partition)
	if err != nil {
		return fmt.Errorf("log start of %s/%d: %w", k.topic, k.partition, err)
	}
	r.Log.Error("a topic was deleted and made again: the offset stored for it is the old log's; applying the new one from its start",
		"consumer", c.Name, "topic", k.topic, "partition", k.partition, "stored", was.next,
		"old_topic_id", was.topicID, "topic_id", id, "log_start", start)
	return r.moveStored(ctx, c, k, was, start, -1, id)
}

// cutBack handles the partitions the client found cut back below what it
// had consumed (kgo.ErrDataLoss). Under the topic id the offset was
// stored for, an unclean leader election made a replica that lagged its
// leader the new leader: the records the old leader had past the point
// where the logs part were lost, and whatever the log holds from there on
// was written since. The stored offset moves to that point, where the
// client resumed: found by the leader epoch of the last record applied,
// or, with no epoch to ask about, the log's start (the records read again
// are taken once by id). Under another id the topic was made again, and
// the offset moves to the new log's start. Either way the consumer then
// re-reads from the stored offsets (errRejoin), dropping what it fetched.
func (r *Runner) cutBack(ctx context.Context, c Consumer, logs *logsRead) error {
	lost := logs.lost
	logs.lost = nil
	for _, e := range lost {
		k := tp{e.Topic, e.Partition}
		var was claimed
		var id pgtype.UUID
		err := r.Pool.QueryRow(ctx, `SELECT next_offset, topic_id FROM consumer_offsets WHERE consumer = $1 AND topic = $2 AND partition = $3`,
			c.Name, k.topic, k.partition).Scan(&was.next, &id)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // nothing stored: nothing applied to lose
		case err != nil:
			return fmt.Errorf("read the stored offset of %s/%d: %w", k.topic, k.partition, err)
		}
		was.topicID = id.Bytes
		if was.topicID != uuid.Nil {
			now, err := logs.current(ctx, k.topic)
			if err != nil {
				return fmt.Errorf("the id of %s: %w", k.topic, err)
			}
			if now != was.topicID {
				if err := r.toNewLog(ctx, c, logs, k, was, now); err != nil {
					return err
				}
				continue
			}
		}
		if was.next <= e.ResetTo {
			continue // the cut is past what was applied
		}
		r.Log.Error("a log was cut back below the offset stored for it (an unclean leader election): the records past the cut are lost; reading on from the cut",
			"consumer", c.Name, "topic", k.topic, "partition", k.partition, "stored", was.next,
			"consumed_to", e.ConsumedTo, "cut_at", e.ResetTo, "epoch", e.ResetToEpoch)
		if err := r.moveStored(ctx, c, k, was, e.ResetTo, e.ResetToEpoch, uuid.Nil); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: logs cut back", errRejoin)
}

// moveStored moves the stored offset of k to to, with the leader epoch of
// the record before it (-1: not known), and its topic id to id (unless
// uuid.Nil), only if the row is still as claimed (was).
func (r *Runner) moveStored(ctx context.Context, c Consumer, k tp, was claimed, to int64, epoch int32, id uuid.UUID) error {
	if _, err := r.Pool.Exec(ctx, `UPDATE consumer_offsets SET next_offset = $4, leader_epoch = nullif($5, -1), leader_epoch_at = $4,
		topic_id = coalesce($6, topic_id), updated_at = now()
		WHERE consumer = $1 AND topic = $2 AND partition = $3 AND next_offset = $7 AND topic_id IS NOT DISTINCT FROM $8`,
		c.Name, k.topic, k.partition, to, epoch, nullID(id), was.next, nullID(was.topicID)); err != nil {
		return fmt.Errorf("move the stored offset of %s/%d: %w", k.topic, k.partition, err)
	}
	return nil
}

// nullID is id as a parameter, NULL for uuid.Nil.
func nullID(id uuid.UUID) pgtype.UUID {
	return pgtype.UUID{Bytes: id, Valid: id != uuid.Nil}
}

// logsRead is what a session knows of the logs it reads: their bounds,
// asked when a batch needs them, and the ids of their topics, as its
// fetches carry them (a topic missing: not known, as from a broker whose
// fetches carry none).
type logsRead struct {
	bounds logBoundsFunc
	// current asks the brokers for a topic's id now.
	current func(ctx context.Context, topic string) (uuid.UUID, error)
	ids     map[string]uuid.UUID
	// lost are the partitions the client found cut back since the session
	// last handled them (cutBack).
	lost []*kgo.ErrDataLoss
}

// other reports whether the offset claimed of a partition of topic was
// stored for another topic id than this session reads (both known).
func (l *logsRead) other(topic string, was claimed) bool {
	id, known := l.ids[topic]
	return known && was.topicID != uuid.Nil && was.topicID != id
}

// learn keeps the topic ids that fetches carry, and the partitions they
// report cut back (each is reported once). A session's client never
// adopts a topic's new id (a fetch of a topic made again fails, and ends
// the session), so within a session an id does not change.
func (l *logsRead) learn(fetches kgo.Fetches) {
	for _, f := range fetches {
		for _, t := range f.Topics {
			if t.TopicID != uuid.Nil {
				l.ids[t.Topic] = t.TopicID
			}
			for _, p := range t.Partitions {
				if lost, ok := errors.AsType[*kgo.ErrDataLoss](p.Err); ok {
					l.lost = append(l.lost, lost)
				}
			}
		}
	}
}

// logBoundsFunc tells the first offset a partition's log still holds and
// the offset its next record takes (its end, the high watermark).
type logBoundsFunc func(ctx context.Context, topic string, partition int32) (start, end int64, err error)

func logBoundsOf(cl *kgo.Client) logBoundsFunc {
	return func(ctx context.Context, topic string, partition int32) (int64, int64, error) {
		adm := kadm.NewClient(cl)
		var bounds [2]int64
		for i, list := range []func(context.Context, ...string) (kadm.ListedOffsets, error){adm.ListStartOffsets, adm.ListEndOffsets} {
			offs, err := list(ctx, topic)
			if err != nil {
				return 0, 0, err
			}
			o, ok := offs.Lookup(topic, partition)
			if !ok {
				return 0, 0, fmt.Errorf("no offsets listed for %s/%d", topic, partition)
			}
			if o.Err != nil {
				return 0, 0, o.Err
			}
			bounds[i] = o.Offset
		}
		return bounds[0], bounds[1], nil
	}
}

// topicIDOf asks the brokers for a topic's id, by its name.
func topicIDOf(cl *kgo.Client) func(ctx context.Context, topic string) (uuid.UUID, error) {
	return func(ctx context.Context, topic string) (uuid.UUID, error) {
		listed, err := kadm.NewClient(cl).ListTopics(ctx, topic)
		if err != nil {
			return uuid.Nil, err
		}
		td, ok := listed[topic]
		if !ok {
			return uuid.Nil, fmt.Errorf("%s not listed", topic)
		}
		if td.Err != nil {
			return uuid.Nil, td.Err
		}
		return uuid.UUID(td.ID), nil
	}
}

// storedAt is where a stored offset puts a consumer: the offset, and the
// leader epoch of the record before it (-1: not known, or stored for
// another offset than the row's, which something other than the runner
// moved: an older release, a hand edit).
type storedAt struct {
	next  int64
	epoch int32
}

// loadStored reads the offsets stored for consumer, with their epochs.
func loadStored(ctx context.Context, pool *pgxpool.Pool, consumer string) (map[tp]storedAt, error) {
	rows, err := pool.Query(ctx, `SELECT topic, partition, next_offset,
		CASE WHEN leader_epoch_at = next_offset THEN coalesce(leader_epoch, -1) ELSE -1 END FROM consumer_offsets WHERE consumer = $1`, consumer)
	if err != nil {
		return nil, fmt.Errorf("load offsets of %s: %w", consumer, err)
	}
	out := map[tp]storedAt{}
	var k tp
	var at storedAt
	_, err = pgx.ForEachRow(rows, []any{&k.topic, &k.partition, &at.next, &at.epoch}, func() error {
		out[k] = at
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load offsets of %s: %w", consumer, err)
	}
	return out, nil
}

// storedBehind reports whether any owned partition's stored offset is now
// lower than what this consumer applied (or was removed).
func storedBehind(ctx context.Context, pool *pgxpool.Pool, consumer string, applied map[tp]int64) (bool, error) {
	if len(applied) == 0 {
		return false, nil
	}
	stored, err := loadStored(ctx, pool, consumer)
	if err != nil {
		return false, err
	}
	for k, off := range applied {
		if stored[k].next < off { // a missing row counts as 0
			return true, nil
		}
	}
	return false, nil
}

// Sink is the Handler of a stage that emits nothing (a projector): apply
// the records inside tx.
func Sink(apply func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error) Handler {
	return func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) ([]*kgo.Record, error) {
		return nil, apply(ctx, tx, recs)
	}
}
