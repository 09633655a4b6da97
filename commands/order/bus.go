package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/pgnotify"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrCommandLog means the command could not be written to the log (Kafka
// away): nothing was accepted.
var ErrCommandLog = errors.New("the order command log is unavailable")

// ErrUndecided means the command was written to the log but no decision
// came within the wait: it will still be decided.
var ErrUndecided = errors.New("the order command was accepted but not decided in time")

// ErrLogUnread means whether an earlier attempt's command is on the log is
// not known yet (the order decider has not read the log that far, or the
// lookup failed): nothing was sent.
var ErrLogUnread = errors.New("the order decider has not read the command log this far yet")

// ErrClaimUndecided means an order of the same content, claimed moments
// before, was not decided within the wait, so whether this one is its
// duplicate is not known yet: its command was not sent.
var ErrClaimUndecided = errors.New("an order of the same content is not decided yet")

// Bus sends order commands and waits for their decisions.
type Bus struct {
	Producer *kgo.Client
	Pool     *pgxpool.Pool
	Notify   *pgnotify.Listener // channel NotifyDecided
	Naming   schemas.Naming     // topic names on the cluster
}

// Record is the pod.order.commands record of c, keyed by order id so one
// decider owns each order.
func Record(n schemas.Naming, c Command) (*kgo.Record, error) {
	value, err := codec.Marshal(c)
	if err != nil {
		return nil, err
	}
	if len(value) > MaxCommandBytes {
		return nil, &TooLargeError{Size: len(value)}
	}
	return &kgo.Record{Topic: n.Topic(schemas.TopicOrderCommands), Key: []byte(c.OrderID.String()), Value: value,
		Headers: []kgo.RecordHeader{{Key: "kind", Value: []byte(c.Kind)}}}, nil
}

// Send appends a command to pod.order.commands and returns once the broker
// acknowledged it.
func Send(ctx context.Context, producer *kgo.Client, n schemas.Naming, c Command) error {
	rec, err := Record(n, c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("%w: %w", ErrCommandLog, err)
	}
	return nil
}

// Refused reports whether a send failed because the record was refused
// for its size, which leaves it off the log for certain: any other failure
// (a timeout, a connection lost) may have left it on the log all the same.
func Refused(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// Decide sends c (unless it was decided already, e.g. a batch item worked a
// second time) and waits up to wait for its decision. Once c is on the
// log, a wait that ends without its decision, for whatever reason (its
// time, shutdown, the database), is ErrUndecided: c will still be decided.
func (b *Bus) Decide(ctx context.Context, c Command, wait time.Duration) (Decision, error) {
	var sent bool
	d, err := pgnotify.Decide(ctx, b.Notify, NotifyDecided, c.ID.String(), wait, b.announcement(c.ID), b.send(c, &sent))
	return b.undecidedOnceSent(d, err, sent)
}

// DecideNew is Decide for a command with no decision found: a fresh id,
// or one its caller has just looked up (a decision made since is announced
// again when the decider meets the command once more). It sends and
// waits, loading the decision once.
func (b *Bus) DecideNew(ctx context.Context, c Command, wait time.Duration) (Decision, error) {
	var sent bool
	d, err := pgnotify.DecideNew(ctx, b.Notify, NotifyDecided, c.ID.String(), wait, b.announcement(c.ID), b.send(c, &sent))
	return b.undecidedOnceSent(d, err, sent)
}

// send sends c, noting in sent that it is on the log.
func (b *Bus) send(c Command, sent *bool) func(context.Context) error {
	return func(ctx context.Context) error {
		err := Send(ctx, b.Producer, b.Naming, c)
		*sent = err == nil
		return err
	}
}

// undecidedOnceSent makes any end of the wait for a command sent
// ErrUndecided; before the send, an error is what it is.
func (b *Bus) undecidedOnceSent(d Decision, err error, sent bool) (Decision, error) {
	switch {
	case err == nil || !sent:
		return d, err
	case errors.Is(err, context.DeadlineExceeded):
		return Decision{}, ErrUndecided
	}
	return Decision{}, fmt.Errorf("%w (the wait ended: %v)", ErrUndecided, err)
}

// announcement reads a command's decision from its announcement, or from
// the decisions table when the announcement came without it.
func (b *Bus) announcement(commandID uuid.UUID) pgnotify.Announcement[Decision] {
	return pgnotify.Announcement[Decision]{
		Load: func(ctx context.Context) (Decision, bool, error) { return LoadDecision(ctx, b.Pool, commandID) },
		Parse: func(v string) (Decision, bool) {
			d, ok := parseDecision(v)
			return d, ok && d.CommandID == commandID
		},
	}
}

// undecided turns the end of the wait into ErrUndecided.
func (b *Bus) undecided(d Decision, err error) (Decision, error) {
	if errors.Is(err, context.DeadlineExceeded) {
		return Decision{}, ErrUndecided
	}
	return d, err
}

// DecisionOnceRead looks up the decision of a command an earlier attempt
// may have put on the log (it stopped between the send and its record of
// it, or its send failed in flight), once the order decider has applied
// the log up to logEnd (its last offsets by partition, read after that
// attempt ended; nil: read now): not found then, the command is not on it.
// Any other end, the decider not getting that far within wait among them,
// is ErrLogUnread: it is not known yet.
func (b *Bus) DecisionOnceRead(ctx context.Context, commandID uuid.UUID, logEnd map[int32]int64, wait time.Duration) (Decision, bool, error) {
	topic := b.Naming.Topic(schemas.TopicOrderCommands)
	if logEnd == nil {
		var err error
		if logEnd, err = b.LogEnd(ctx); err != nil {
			return Decision{}, false, fmt.Errorf("%w: %v", ErrLogUnread, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := stream.WaitApplied(wctx, b.Pool, DeciderName, topic, logEnd); err != nil {
		return Decision{}, false, fmt.Errorf("%w: %v", ErrLogUnread, err)
	}
	d, ok, err := LoadDecision(ctx, b.Pool, commandID)
	if err != nil {
		return Decision{}, false, fmt.Errorf("%w: %v", ErrLogUnread, err)
	}
	return d, ok, nil
}

// LogEnd is the command log's last offsets by partition, as it stands now.
func (b *Bus) LogEnd(ctx context.Context) (map[int32]int64, error) {
	last, _, err := kafka.LastOffsets(ctx, kadm.NewClient(b.Producer), b.Naming.Topic(schemas.TopicOrderCommands))
	return last, err
}

// Await waits for the decision of an already sent command.
func (b *Bus) Await(ctx context.Context, commandID uuid.UUID, wait time.Duration) (Decision, error) {
	return b.undecided(pgnotify.Await(ctx, b.Notify, NotifyDecided, commandID.String(), wait, b.announcement(commandID)))
}

// AwaitSent waits for the decision of a command sent after wake was
// subscribed (Notify.Subscribe(NotifyDecided, the command's id)) and put on
// the log at at. The command may have been sent and decided before (a
// push's start_push sent again by a takeover): its decision is then in the
// table already, but the order's version there (Decision.Current) counts
// the records ahead of at on its partition (the earlier worker's outcome,
// say) only once the decider has applied them. So a decision read from the
// table (a poll, or a wake without the decision, as the decider's
// announcement of a command met again is) counts only once the decider's
// offsets are past at; its offsets commit with its decisions.
func (b *Bus) AwaitSent(ctx context.Context, wake <-chan string, commandID uuid.UUID, at stream.Place, wait time.Duration) (Decision, error) {
	a := b.announcement(commandID)
	load := a.Load
	a.Load = func(ctx context.Context) (Decision, bool, error) {
		have, err := stream.Offsets(ctx, b.Pool, DeciderName, at.Topic)
		if err != nil || have[at.Partition] <= at.Offset {
			return Decision{}, false, err
		}
		return load(ctx)
	}
	return b.undecided(pgnotify.AwaitSubscribed(ctx, wake, wait, a))
}
