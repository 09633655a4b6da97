package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/commands/webhook"
	"github.com/printpod/pod/delivery"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/pg"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/projections"
	deliveryrm "github.com/printpod/pod/projections/delivery"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Dead letters: records a stage consumer could not apply, in
// pod.dlq.<consumer> (see internal/stream). `dlq list` shows them, `dlq
// replay` re-produces them to their original topic.
//
// A dead letter is replayed at most once: the replay position of a
// consumer's dead-letter topic is a row of dlq_replay_positions in Postgres,
// and every dead letter below it was replayed. It is stored after each
// record is produced (acks=all), so an interrupted replay goes on where it
// stopped; only a crash between a produce and its store replays that one
// record twice, which the stages absorb (commands are idempotent by id,
// projections are versioned). A replay holds a Postgres advisory lock for
// its consumer, so two replays of one consumer never run at once. A
// position a previous release kept as the commit of the consumer group
// podctl.dlq-replay.<consumer> is read while the consumer has no row.

func dlqCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "Show and re-drive the stage consumers' dead letters (pod.dlq.<consumer>)"}
	var consumer string
	list := &cobra.Command{
		Use:   "list [--consumer NAME]",
		Short: "Print every dead letter as one JSON line",
		Long: "Prints, for each dead letter of the consumer (of every consumer without --consumer):\n" +
			"the consumer, its offset in the dead-letter topic, the original topic, partition and\n" +
			"offset, the error, when it was dead-lettered, the key, and whether it was replayed; for\n" +
			"a dead letter too large for its topic whole, how many bytes of the record it left out.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := openDLQ(cmd.Context())
			if err != nil {
				return err
			}
			defer d.close()
			return d.list(cmd.Context(), consumer, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	list.Flags().StringVar(&consumer, "consumer", "", "consumer name, e.g. order-decider (default: all)")

	var upTo int64
	replay := &cobra.Command{
		Use:   "replay --consumer NAME [--offset N]",
		Short: "Re-produce dead letters to their original topic, each at most once",
		Long: "Re-produces the consumer's dead letters not replayed yet, in order, to their original\n" +
			"topic with their original key, value and headers; with --offset N only those up to\n" +
			"dead-letter offset N (as `dlq list` shows it). The position is kept in Postgres, so\n" +
			"no dead letter is replayed twice, and one replay of a consumer runs at a time. A dead letter\n" +
			"that was too large to keep its record whole reads it back from the original topic (one\n" +
			"retention deleted is passed, saying so). Fix the cause\n" +
			"first: a record that still cannot be applied is dead-lettered again. A delivery task\n" +
			"projections.deliveries dead-lettered is passed, not replayed: the webhook sender reads\n" +
			"its topic too and would send the webhook again.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if consumer == "" {
				return errors.New("--consumer is required")
			}
			// A read model podctl replay rebuilds: its projector passed
			// over an entity's later events when its earlier one was
			// missing, so an event put back on its own would take the
			// entity back to that event's version.
			if projection, ok := projections.ByConsumer(consumer); ok {
				return fmt.Errorf("the dead letters of %s are not replayed one by one: the later events "+
					"of what they touch were passed over without them, and the events topic's other "+
					"consumers would take them again; once the cause is fixed, rebuild the read model "+
					"with `podctl replay --projection %s`", consumer, projection)
			}
			if !cmd.Flags().Changed("offset") {
				upTo = -1
			} else if upTo < 0 {
				return fmt.Errorf("--offset must not be negative")
			}
			d, err := openDLQ(cmd.Context())
			if err != nil {
				return err
			}
			defer d.close()
			return d.replay(cmd.Context(), consumer, upTo, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	replay.Flags().StringVar(&consumer, "consumer", "", "consumer name, e.g. order-decider")
	replay.Flags().Int64Var(&upTo, "offset", 0, "replay only dead letters up to this dead-letter offset")
	cmd.AddCommand(list, replay)
	return cmd
}

// ReplayGroup is the consumer group whose committed offset was the replay
// position of consumer's dead-letter topic (with the group prefix of n) in
// previous releases; legacyPosition still reads it.
func ReplayGroup(n schemas.Naming, consumer string) string {
	return n.Group("podctl.dlq-replay." + consumer)
}

type dlqEnv struct {
	naming  schemas.Naming
	brokers []string
	pool    *pgxpool.Pool // the replay positions
	prod    *kgo.Client
	adm     *kadm.Client
}

func openDLQ(ctx context.Context) (*dlqEnv, error) {
	e, err := openKafkaEnv(ctx)
	if err != nil {
		return nil, err
	}
	brokers, err := kafka.ResolveBrokers(e.cfg.KafkaBrokers, e.cfg.KafkaAddrFile())
	if err != nil {
		e.close()
		return nil, err
	}
	return &dlqEnv{naming: e.cfg.Naming(), brokers: brokers, pool: e.pool, prod: e.kafka, adm: kadm.NewClient(e.kafka)}, nil
}

func (d *dlqEnv) close() {
	d.prod.Close()
	d.pool.Close()
}

// DeadLetter is one line of `podctl dlq list`.
type DeadLetter struct {
	Consumer  string `json:"consumer"`
	DLQOffset int64  `json:"dlq_offset"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Error     string `json:"error"`
	Time      string `json:"time"`
	Key       string `json:"key"`
	// Dropped is how many bytes of the record's key, value and headers
	// the dead letter left out, being too large for its topic whole (a
	// replay reads the record back from its topic).
	Dropped  int64 `json:"dropped_bytes,omitempty"`
	Replayed bool  `json:"replayed"`
	// Skipped says why a replay passes the dead letter without putting it
	// back, when that follows from the dead letter and its record (putBack,
	// refusedCreate), as the replay's own line does; replayed is false for
	// it (found by review: such a dead letter, passed, was listed as
	// replayed).
	Skipped string `json:"skipped,omitempty"`
}

func (d *dlqEnv) list(ctx context.Context, consumer string, w, errw io.Writer) error {
	consumers := []string{consumer}
	if consumer == "" {
		topics, err := d.adm.ListTopics(ctx)
		if err != nil {
			return fmt.Errorf("list topics: %w", err)
		}
		consumers = nil
		for _, t := range topics.Names() {
			if c, ok := d.naming.DeadLetterConsumer(t); ok {
				consumers = append(consumers, c)
			}
		}
		slices.Sort(consumers)
	}
	enc := json.NewEncoder(w)
	for _, c := range consumers {
		pos, end, err := d.positionIn(ctx, c, false, errw)
		if err != nil {
			return err
		}
		err = d.read(ctx, c, 0, end, func(r *kgo.Record) error {
			at, _ := stream.DeadLetterPlace(r)
			// As a replay judges it, the record read back from its topic
			// when the dead letter could not hold it whole; when that read
			// fails, only the replay can tell.
			skipped := ""
			if out, why, err := d.putBack(ctx, c, at.Topic, r); err == nil {
				skipped = why
				if out != nil {
					skipped = refusedCreate(c, out)
				}
			}
			return enc.Encode(DeadLetter{
				Consumer: c, DLQOffset: r.Offset,
				Topic: at.Topic, Partition: at.Partition,
				Offset: at.Offset, Error: stream.Header(r, stream.HeaderDLQError),
				Time: stream.Header(r, stream.HeaderDLQTime), Key: string(r.Key), Dropped: headerInt(r, stream.HeaderDLQDropped),
				Replayed: r.Offset < pos && skipped == "", Skipped: skipped,
			})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Replayed is one line of `podctl dlq replay`.
type Replayed struct {
	Consumer  string `json:"consumer"`
	DLQOffset int64  `json:"dlq_offset"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"` // where the replayed record went
	Offset    int64  `json:"offset"`    // its new offset there
	Key       string `json:"key"`
	// Skipped says why the dead letter was passed without a replay
	// (alsoReadBy); partition and offset are then 0.
	Skipped string `json:"skipped,omitempty"`
}

func (d *dlqEnv) replay(ctx context.Context, consumer string, upTo int64, w, errw io.Writer) error {
	unlock, err := d.lock(ctx, consumer)
	if err != nil {
		return err
	}
	defer unlock()
	pos, end, err := d.positionIn(ctx, consumer, true, errw)
	if err != nil {
		return err
	}
	if upTo >= 0 && upTo+1 < end {
		end = upTo + 1
	}
	if pos >= end {
		fmt.Fprintf(errw, "nothing to replay for %s (replayed up to offset %d)\n", consumer, pos)
		return nil
	}
	enc := json.NewEncoder(w)
	n := 0
	err = d.read(ctx, consumer, pos, end, func(r *kgo.Record) error {
		orig := stream.Header(r, stream.HeaderDLQTopic)
		if orig == "" {
			return fmt.Errorf("dead letter %s/%d has no %s header", d.naming.DeadLetterTopic(consumer), r.Offset, stream.HeaderDLQTopic)
		}
		done := Replayed{Consumer: consumer, DLQOffset: r.Offset, Topic: orig, Key: string(r.Key)}
		out, skipped, err := d.putBack(ctx, consumer, orig, r)
		if err != nil {
			return fmt.Errorf("dead letter %d: %w", r.Offset, err)
		}
		if out != nil {
			done.Key = string(out.Key)
			if skipped, err = d.sticksAnOrder(ctx, consumer, orig, out); err != nil || skipped != "" {
				if err == nil {
					err = fmt.Errorf("dead letter %d not replayed, nor any after it: %s", r.Offset, skipped)
				}
				return err
			}
			skipped = refusedCreate(consumer, out)
		}
		if skipped != "" {
			done.Skipped = skipped
			fmt.Fprintf(errw, "dead letter %d not replayed: %s\n", r.Offset, done.Skipped)
		} else {
			if err := d.prod.ProduceSync(ctx, out).FirstErr(); err != nil {
				return fmt.Errorf("replay dead letter %d to %s: %w", r.Offset, orig, err)
			}
			done.Partition, done.Offset = out.Partition, out.Offset
			n++
		}
		// Saved after an interrupt too: the record may be on the log
		// already (a produce under way cannot be called back), and a
		// position not saved would replay it again at the next run.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = d.store(sctx, consumer, r.Offset+1)
		cancel()
		if err != nil {
			return fmt.Errorf("dead letter %d is done (%+v) but its position was not saved: %w", r.Offset, done, err)
		}
		return enc.Encode(done)
	})
	fmt.Fprintf(errw, "replayed %d dead letters of %s\n", n, consumer)
	return err
}

// putBack is the record a dead letter r of consumer puts back on topic
// (its original key, value and headers, read back from where it was
// consumed when the dead letter could not hold it whole), or why none.
func (d *dlqEnv) putBack(ctx context.Context, consumer, topic string, r *kgo.Record) (*kgo.Record, string, error) {
	if other := alsoReadBy(d.naming, consumer, topic); other != "" {
		return nil, fmt.Sprintf("%s reads %s too and would take it again", other, topic), nil
	}
	out := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		if !strings.HasPrefix(h.Key, stream.HeaderDLQPrefix) {
			out.Headers = append(out.Headers, h)
		}
	}
	dropped := stream.Header(r, stream.HeaderDLQDropped)
	if dropped == "" {
		return out, "", nil
	}
	at, _ := stream.DeadLetterPlace(r)
	kept, err := d.original(ctx, topic, at.Partition, at.Offset)
	if err != nil {
		return nil, "", fmt.Errorf("read its record back from %s/%d at %d: %w", topic, at.Partition, at.Offset, err)
	}
	if kept == nil {
		return nil, fmt.Sprintf("its record (%s bytes) was too large to dead-letter whole, and %s/%d no longer holds offset %d",
			dropped, topic, at.Partition, at.Offset), nil
	}
	out.Key, out.Value, out.Headers = kept.Key, kept.Value, kept.Headers
	return out, "", nil
}

// refusedCreate says why an order create the decider dead-lettered is not
// put back, or "": it was refused as it was dead-lettered, and its client
// told the order was not created. Put back once that refusal is pruned
// (order.DecisionRetention), it would make the order after all.
//
// A client's webhook change the webhook decider dead-lettered is refused
// the same way (webhook.Decider.Refuse), and passed for the same reason.
func refusedCreate(consumer string, rec *kgo.Record) string {
	var c struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(rec.Value, &c) != nil {
		return ""
	}
	switch {
	case consumer == order.DeciderName && c.Kind == order.KindCreate:
		return "an order create is refused as it is dead-lettered (its client was told the order was not created); put back, it would make the order once the refusal is pruned"
	case consumer == webhook.DeciderName && webhook.RefusedDeadLettered(c.Kind):
		return "a webhook change is refused as it is dead-lettered (its client was told it was not applied); put back, it would apply once the refusal is pruned"
	}
	return ""
}

// sticksAnOrder says why a dead letter of the fan-out must not go back to
// the order events topic yet, or "": an order's created event, of an order
// the read model lacks while the decider has it at a later version. The
// order projector reads that topic too; it dead-lettered that event as
// well and passed over the order's later events, so the event put back
// alone would show the order at version 1 for good. Once the read model is
// rebuilt (podctl replay --projection orders) it has the order, passes the
// event as one of a version it has, and the replay can go on.
func (d *dlqEnv) sticksAnOrder(ctx context.Context, consumer, topic string, r *kgo.Record) (string, error) {
	if consumer != delivery.FanoutName || topic != d.naming.Topic(schemas.TopicOrderEvents) || schemas.OrderVersion(r.Headers) != 1 {
		return "", nil
	}
	id, err := uuid.ParseBytes(r.Key)
	if err != nil {
		return "", nil
	}
	var shown, decided *int
	if err := d.pool.QueryRow(ctx, `SELECT (SELECT version FROM orders WHERE order_id = $1), (SELECT version FROM order_state WHERE order_id = $1)`,
		id).Scan(&shown, &decided); err != nil {
		return "", fmt.Errorf("versions of order %s: %w", id, err)
	}
	if shown != nil || decided == nil || *decided <= 1 {
		return "", nil
	}
	return fmt.Sprintf("it is order %s's created event; %s reads %s too and has not got that order, which the decider has at version %d, "+
		"so the event alone would show it at version 1 for good: rebuild the read model first (podctl replay --projection orders), then run this replay again",
		id, orderrm.ConsumerName, topic, *decided), nil
}

// alsoReadBy names the other consumer that would take a dead letter of
// consumer again if it went back to topic, or "". The delivery log's
// dead-lettered tasks are the one case: their topic is the webhook
// sender's too, and a task sent again once its done-mark expired (15
// minutes) is a second request to the client. The order projector also
// reads the fan-out's topic, but passes over an event of a version it has
// (and sticksAnOrder stops the replay at an order it has not got).
func alsoReadBy(n schemas.Naming, consumer, topic string) string {
	if consumer == deliveryrm.ConsumerName && topic == n.Topic(schemas.TopicWebhookDeliveries) {
		return delivery.SenderGroup
	}
	return ""
}

// lock takes the advisory lock of consumer's replays, or says that
// another replay holds it.
func (d *dlqEnv) lock(ctx context.Context, consumer string) (unlock func(), err error) {
	unlock, held, err := pg.TryLock(ctx, d.pool, "podctl.dlq-replay "+d.naming.DeadLetterTopic(consumer))
	if err == nil && !held {
		err = fmt.Errorf("another dlq replay of %s is running: run this one once it has ended", consumer)
	}
	return unlock, err
}

// store saves the replay position of consumer: next is the first dead
// letter not replayed yet.
func (d *dlqEnv) store(ctx context.Context, consumer string, next int64) error {
	_, err := d.pool.Exec(ctx, `INSERT INTO dlq_replay_positions (dlq_topic, next_offset) VALUES ($1, $2)
		ON CONFLICT (dlq_topic) DO UPDATE SET next_offset = GREATEST(dlq_replay_positions.next_offset, excluded.next_offset),
			updated_at = now()`, d.naming.DeadLetterTopic(consumer), next)
	return err
}

// position is the replay position: the first dead letter not replayed
// yet. A consumer with no row yet may have a position a previous release
// committed in Kafka (legacyPosition).
func (d *dlqEnv) position(ctx context.Context, consumer string) (int64, error) {
	var pos int64
	err := d.pool.QueryRow(ctx, `SELECT next_offset FROM dlq_replay_positions WHERE dlq_topic = $1`,
		d.naming.DeadLetterTopic(consumer)).Scan(&pos)
	switch {
	case err == nil:
		return pos, nil
	case errors.Is(err, pgx.ErrNoRows):
		return d.legacyPosition(ctx, consumer)
	}
	return 0, fmt.Errorf("replay position of %s: %w", consumer, err)
}

// positionIn is consumer's replay position and its dead-letter topic's
// end. A position past the end names the dead letters of a topic since
// deleted and made again (a cluster lost or moved, Postgres kept): those
// of the new one are all still to replay, so it is taken as 0, as errw
// says, and when reset is set (a replay, under its lock) stored so.
func (d *dlqEnv) positionIn(ctx context.Context, consumer string, reset bool, errw io.Writer) (pos, end int64, err error) {
	if pos, err = d.position(ctx, consumer); err != nil {
		return 0, 0, err
	}
	if end, err = d.end(ctx, consumer); err != nil || pos <= end {
		return pos, end, err
	}
	topic := d.naming.DeadLetterTopic(consumer)
	fmt.Fprintf(errw, "%s ends at offset %d, before the replay position %d: the topic was made again since, and its dead letters count as not replayed\n",
		topic, end, pos)
	if reset {
		if _, err := d.pool.Exec(ctx, `UPDATE dlq_replay_positions SET next_offset = 0, updated_at = now() WHERE dlq_topic = $1 AND next_offset = $2`,
			topic, pos); err != nil {
			return 0, 0, fmt.Errorf("reset the replay position of %s: %w", consumer, err)
		}
	}
	return 0, end, nil
}

// legacyPosition is the replay position a previous release committed as
// the offset of the consumer group podctl.dlq-replay.<consumer>, or 0.
// To be removed once no deployment has such positions left.
func (d *dlqEnv) legacyPosition(ctx context.Context, consumer string) (int64, error) {
	resp, err := d.adm.FetchOffsets(ctx, ReplayGroup(d.naming, consumer))
	if err != nil {
		if errors.Is(err, kerr.GroupIDNotFound) {
			return 0, nil
		}
		return 0, fmt.Errorf("replay position of %s: %w", consumer, err)
	}
	o, ok := resp.Lookup(d.naming.DeadLetterTopic(consumer), 0)
	if !ok || o.Err != nil || o.At < 0 {
		return 0, nil
	}
	return o.At, nil
}

// end is the end offset of consumer's dead-letter topic, whose one
// partition (schemas.DeadLetterPartitions) is partition 0.
func (d *dlqEnv) end(ctx context.Context, consumer string) (int64, error) {
	topic := d.naming.DeadLetterTopic(consumer)
	ends, err := d.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return 0, fmt.Errorf("no dead-letter topic %s: is %q a stage consumer?", topic, consumer)
		}
		return 0, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if n := len(ends[topic]); n != schemas.DeadLetterPartitions {
		return 0, fmt.Errorf("%s has %d partitions, want %d", topic, n, schemas.DeadLetterPartitions)
	}
	o, _ := ends.Lookup(topic, 0)
	return o.Offset, nil
}

// read calls f for each record of consumer's dead-letter topic in [from, to).
func (d *dlqEnv) read(ctx context.Context, consumer string, from, to int64, f func(*kgo.Record) error) error {
	return kafka.ReadPartition(ctx, d.brokers, d.naming.DeadLetterTopic(consumer), 0, from, to, f)
}

// original is the record at offset of topic's partition, or nil when the
// log no longer holds it (retention deleted it, or compaction).
func (d *dlqEnv) original(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, error) {
	starts, err := d.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	ends, err := d.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	start, _ := starts.Lookup(topic, partition)
	end, _ := ends.Lookup(topic, partition)
	if offset < start.Offset || offset >= end.Offset {
		return nil, nil
	}
	var kept *kgo.Record
	err = kafka.ReadPartition(ctx, d.brokers, topic, partition, offset, offset+1, func(r *kgo.Record) error {
		kept = r
		return nil
	})
	return kept, err
}

func headerInt(r *kgo.Record, key string) int64 {
	n, _ := strconv.ParseInt(stream.Header(r, key), 10, 64)
	return n
}
