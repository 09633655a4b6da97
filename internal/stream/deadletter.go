package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers a dead letter carries on top of the original record's headers.
const (
	HeaderDLQError     = "pod-dlq-error"     // the error that made the record unapplicable
	HeaderDLQTopic     = "pod-dlq-topic"     // the topic the record was consumed from
	HeaderDLQPartition = "pod-dlq-partition" // its partition (decimal)
	HeaderDLQOffset    = "pod-dlq-offset"    // its offset (decimal)
	HeaderDLQConsumer  = "pod-dlq-consumer"  // the consumer that gave up on it
	HeaderDLQTime      = "pod-dlq-time"      // when, RFC 3339 with nanoseconds, UTC
	// HeaderDLQDropped is on a dead letter the dead-letter topic would not
	// take whole: the record's value and headers are left out (its key too
	// unless short, and the error is cut), and this header says how many
	// bytes of the record were (decimal). The record is still
	// at its topic, partition and offset, while retention keeps it.
	HeaderDLQDropped = "pod-dlq-dropped"
)

// HeaderDLQPrefix starts every header the dead-lettering adds; a replay
// strips them to restore the original record.
const HeaderDLQPrefix = "pod-dlq-"

// PoisonAttempts is how many times a batch (and then a record on its own)
// is tried while it fails permanently before the runner narrows it down and,
// for a single record, dead-letters it. A failure that comes of the records'
// content alone (isContent) is tried once.
const PoisonAttempts = 3

// poisonError marks an error no retry can fix.
type poisonError struct{ err error }

func (e *poisonError) Error() string { return e.err.Error() }
func (e *poisonError) Unwrap() error { return e.err }

// Poison marks err as permanent: the record that caused it can never be
// applied (it cannot be decoded, or breaks a rule of the data), so the
// runner dead-letters it instead of retrying it forever. Poison(nil) is nil.
func Poison(err error) error {
	if err == nil {
		return nil
	}
	return &poisonError{err}
}

// panicError is a recovered handler panic; it counts as permanent.
type panicError struct{ msg string }

func (e *panicError) Error() string { return e.msg }

// IsPermanent reports whether err is one that retrying the same records
// cannot fix: an error marked with Poison, a handler panic, or a Postgres
// error of SQLSTATE class 21 (cardinality violation: a batch that upserts
// one key twice), 22 (data exception, e.g. 22P05 or 22021 for a NUL byte),
// 23 (integrity constraint violation) or 54 (program limit exceeded; not
// a full NOTIFY queue, which is the listeners' to drain). Everything else
// (connection loss, classes 08, 40, 53, 57, timeouts, Kafka errors) is
// transient and retried without end.
func IsPermanent(err error) bool {
	if err == nil || errors.Is(err, errRejoin) {
		return false
	}
	if isContent(err) {
		return true
	}
	var pn *panicError
	if errors.As(err, &pn) {
		return true
	}
	if tooLarge(err) {
		return true // a record the stage emits that no broker will take
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 {
		switch pgErr.Code[:2] {
		case "23":
			return true
		case "54":
			return pgErr.Routine != "PreCommit_Notify" // the NOTIFY queue is full
		}
	}
	return false
}

// isContent reports whether err comes of the records' content alone, so
// that trying them again fails the same way: an error marked with Poison,
// or a Postgres cardinality violation (class 21) or data exception (class
// 22). A unique violation (a concurrent writer may clear it) or a handler
// panic is not sure to.
func isContent(err error) bool {
	var p *poisonError
	if errors.As(err, &p) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 {
		switch pgErr.Code[:2] {
		case "21", "22":
			return true
		}
	}
	return false
}

// deadLetter moves rec, which failed permanently with cause, to the
// consumer's dead-letter topic and stores its offset as consumed. The
// partition's offset row is locked first, so of two members (one a zombie)
// only the one that still owns the record's position dead-letters it. The
// record is produced (acks=all) before the transaction that advances the
// stored offset past it commits: a crash in between leaves the offset where
// it was, and the record is dead-lettered a second time after the restart
// (podctl dlq list then shows it twice). It is never lost. It reports
// whether the record was dead-lettered (false: already past it, or passed
// as Consumer.DeadLettered says).
func (r *Runner) deadLetter(ctx context.Context, c Consumer, logs *logsRead, rec *kgo.Record, cause error) (bool, error) {
	if r.Producer == nil {
		return false, errors.New("no dead-letter producer configured")
	}
	tx, err := r.Pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	k := tp{rec.Topic, rec.Partition}
	offsets, err := claimOffsets(ctx, tx, c.Name, []tp{k}, []int64{rec.Offset + 1}, []int32{rec.LeaderEpoch}, logs.ids)
	if err != nil {
		return false, err
	}
	if logs.other(k.topic, offsets[k]) {
		return false, errRejoin // stored for another topic id: apply's to sort out
	}
	switch stored := offsets[k].next; {
	case stored > rec.Offset:
		return false, nil // applied or dead-lettered already
	case stored < rec.Offset:
		// Rewound under us (re-read), or the first record after a gap
		// retention left, as in apply.
		if err := r.behind(ctx, c, logs, k, stored, rec.Offset); err != nil {
			return false, err
		}
	}
	if c.DeadLettered != nil && c.DeadLettered(Place{rec.Topic, rec.Partition, rec.Offset}) {
		if err := tx.Commit(ctx); err != nil {
			return false, fmt.Errorf("commit: %w", err)
		}
		r.Log.Info("a record dead-lettered before failed again; passed without a second dead letter", "consumer", c.Name,
			"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", cause)
		return false, nil
	}
	if c.OnDeadLetter != nil {
		if err := onDeadLetter(ctx, tx, c, rec, cause); err != nil {
			if !IsPermanent(err) {
				return false, err // retried, before anything is produced
			}
			r.Log.Error("what a dead letter records beside it failed for good; the record is dead-lettered without it", "consumer", c.Name,
				"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", err)
		}
	}
	dl := DeadLetterRecord(r.Naming, c.deadLetters(), rec, cause, time.Now())
	err = r.Producer.ProduceSync(ctx, dl).FirstErr()
	if tooLarge(err) {
		// The headers added made it too large for the dead-letter topic
		// (or it has a lower limit than the topic the record came from):
		// its place is dead-lettered instead, which a replay reads back.
		dl = withoutContent(dl, rec)
		err = r.Producer.ProduceSync(ctx, dl).FirstErr()
	}
	if err != nil {
		return false, fmt.Errorf("produce dead letter to %s: %w", dl.Topic, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	return true, nil
}

// DeadLetterRecord is the dead letter of rec for consumer, on its
// dead-letter topic as n names it: the same key, value and headers, plus the
// pod-dlq-* headers naming the cause and origin.
func DeadLetterRecord(n schemas.Naming, consumer string, rec *kgo.Record, cause error, at time.Time) *kgo.Record {
	msg := cause.Error()
	if len(msg) > 4000 {
		msg = msg[:4000] + "…"
	}
	headers := make([]kgo.RecordHeader, 0, len(rec.Headers)+6)
	headers = append(headers, rec.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderDLQError, Value: []byte(msg)},
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: []byte(strconv.FormatInt(int64(rec.Partition), 10))},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(rec.Offset, 10))},
		kgo.RecordHeader{Key: HeaderDLQConsumer, Value: []byte(consumer)},
		kgo.RecordHeader{Key: HeaderDLQTime, Value: []byte(at.UTC().Format(time.RFC3339Nano))},
	)
	return &kgo.Record{Topic: n.DeadLetterTopic(consumer), Key: rec.Key, Value: rec.Value, Headers: headers}
}

// tooLarge reports whether err is a broker's (or the producer's) refusal
// of a record for its size.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// withoutContent is dead letter dl of rec without rec's value and headers,
// and its key unless that is short: the pod-dlq-* headers, the error cut
// to slimError bytes, and HeaderDLQDropped saying how many bytes were left
// out.
func withoutContent(dl, rec *kgo.Record) *kgo.Record {
	slim := &kgo.Record{Topic: dl.Topic}
	size := len(rec.Value)
	if len(rec.Key) <= slimKey {
		slim.Key = rec.Key
	} else {
		size += len(rec.Key)
	}
	for _, h := range rec.Headers {
		size += len(h.Key) + len(h.Value)
	}
	for _, h := range dl.Headers[len(rec.Headers):] {
		if h.Key == HeaderDLQError && len(h.Value) > slimError {
			h.Value = append(h.Value[:slimError:slimError], "…"...)
		}
		slim.Headers = append(slim.Headers, h)
	}
	slim.Headers = append(slim.Headers, kgo.RecordHeader{Key: HeaderDLQDropped, Value: []byte(strconv.Itoa(size))})
	return slim
}

// What a dead letter without its record's content keeps at most.
const (
	slimKey   = 256 // bytes of the record's key (ours are ids)
	slimError = 256 // bytes of the error
)

// Place is where a record was consumed.
type Place struct {
	Topic     string
	Partition int32
	Offset    int64
}

// DeadLetterPlaces reads consumer's dead-letter topic (as n names it) and
// returns where each record it holds was consumed; none when the topic
// does not exist.
func DeadLetterPlaces(ctx context.Context, brokers []string, adm *kadm.Client, n schemas.Naming, consumer string) (map[Place]bool, error) {
	places := map[Place]bool{}
	_, err := readDeadLetterPlaces(ctx, brokers, adm, n, consumer, nil, places)
	return places, err
}

// readDeadLetterPlaces adds to places those of the dead letters of
// consumer from offsets from on (each partition's log start where from has
// none) to the log end, and returns the ends it read to.
func readDeadLetterPlaces(ctx context.Context, brokers []string, adm *kadm.Client, n schemas.Naming, consumer string,
	from map[int32]int64, places map[Place]bool) (map[int32]int64, error) {
	topic := n.DeadLetterTopic(consumer)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	read := map[int32]int64{}
	var failed error
	ends.Each(func(end kadm.ListedOffset) {
		if failed != nil || errors.Is(end.Err, kerr.UnknownTopicOrPartition) {
			return
		}
		if failed = end.Err; failed != nil {
			return
		}
		start, _ := starts.Lookup(topic, end.Partition)
		at := max(start.Offset, from[end.Partition])
		if at < end.Offset {
			failed = kafka.ReadPartition(ctx, brokers, topic, end.Partition, at, end.Offset, func(r *kgo.Record) error {
				if p, ok := DeadLetterPlace(r); ok {
					places[p] = true
				}
				return nil
			})
		}
		read[end.Partition] = end.Offset
	})
	if failed != nil {
		return nil, fmt.Errorf("read %s: %w", topic, failed)
	}
	return read, nil
}

// DeadLetteredBy returns a check of whether the record consumed at a place
// is on consumer's dead-letter topic, as a rebuild asks before it
// dead-letters a record the live projector may have dead-lettered already.
// A place not found is looked for again on the topic as it is then: the
// live projector may dead-letter a record after the first read and before
// the rebuild reaches it (found by review: the rebuild dead-lettered such
// a record a second time). A read that fails answers no, so the record is
// dead-lettered (again, at worst).
func DeadLetteredBy(ctx context.Context, brokers []string, adm *kadm.Client, n schemas.Naming, consumer string, log *slog.Logger) (func(Place) bool, error) {
	dead := map[Place]bool{}
	read, err := readDeadLetterPlaces(ctx, brokers, adm, n, consumer, nil, dead)
	if err != nil {
		return nil, err
	}
	return func(at Place) bool {
		if dead[at] {
			return true
		}
		// Only what was written since, and within deadLetteredWait: the
		// caller holds its offset row locked meanwhile.
		rctx, cancel := context.WithTimeout(ctx, deadLetteredWait)
		defer cancel()
		more, err := readDeadLetterPlaces(rctx, brokers, adm, n, consumer, read, dead)
		if err != nil {
			log.Warn("reading the dead letters again failed; the record is dead-lettered, perhaps a second time",
				"consumer", consumer, "topic", at.Topic, "partition", at.Partition, "offset", at.Offset, "err", err)
			return false
		}
		read = more
		return dead[at]
	}, nil
}

// deadLetteredWait bounds DeadLetteredBy's read of the dead letters
// written since its last.
const deadLetteredWait = 10 * time.Second

// DeadLetterPlace is where dead letter r's record was consumed, as its
// pod-dlq-* headers name it; ok is false when a header is missing or
// unreadable (the fields read are returned, the others zero).
func DeadLetterPlace(r *kgo.Record) (at Place, ok bool) {
	at.Topic = Header(r, HeaderDLQTopic)
	p, perr := strconv.ParseInt(Header(r, HeaderDLQPartition), 10, 32)
	o, oerr := strconv.ParseInt(Header(r, HeaderDLQOffset), 10, 64)
	if perr == nil {
		at.Partition = int32(p)
	}
	if oerr == nil {
		at.Offset = o
	}
	return at, at.Topic != "" && perr == nil && oerr == nil
}

// Header is the value of r's header key, or "".
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// onDeadLetter runs c.OnDeadLetter in a savepoint of tx: rolled back on
// its failure, which leaves tx usable. A failure whose rollback failed
// too left tx unusable, and is never permanent.
func onDeadLetter(ctx context.Context, tx pgx.Tx, c Consumer, rec *kgo.Record, cause error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if err := c.OnDeadLetter(ctx, sp, rec, cause); err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			return fmt.Errorf("%v (and its rollback: %w)", err, rbErr)
		}
		return err
	}
	return sp.Commit(ctx)
}
