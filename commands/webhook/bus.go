package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/pgnotify"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrCommandLog means the command could not be written to the log.
var ErrCommandLog = errors.New("the webhook command log is unavailable")

// ErrUndecided means the command is on the log but was not decided in time.
var ErrUndecided = errors.New("the webhook command was accepted but not decided in time")

// Bus sends webhook commands and waits for their decisions.
type Bus struct {
	Producer *kgo.Client
	Pool     *pgxpool.Pool
	Notify   *pgnotify.Listener // channel NotifyDecided
	Naming   schemas.Naming     // topic names on the cluster
}

// Send appends c to pod.webhook.commands, keyed by client id.
func Send(ctx context.Context, producer *kgo.Client, n schemas.Naming, c Command) error {
	value, err := codec.Marshal(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec := &kgo.Record{Topic: n.Topic(schemas.TopicWebhookCommands), Key: []byte(c.AccountID.String()), Value: value,
		Headers: []kgo.RecordHeader{{Key: "kind", Value: []byte(c.Kind)}}}
	if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("%w: %v", ErrCommandLog, err)
	}
	return nil
}

// Decide sends c unless it was decided already and waits up to wait for its
// decision.
func (b *Bus) Decide(ctx context.Context, c Command, wait time.Duration) (Decision, error) {
	dec, err := pgnotify.Decide(ctx, b.Notify, NotifyDecided, c.ID.String(), wait,
		pgnotify.Announcement[Decision]{
			Load:  func(ctx context.Context) (Decision, bool, error) { return LoadDecision(ctx, b.Pool, c.ID) },
			Parse: parseDecision,
		},
		func(ctx context.Context) error { return Send(ctx, b.Producer, b.Naming, c) })
	if errors.Is(err, context.DeadlineExceeded) {
		return Decision{}, ErrUndecided
	}
	return dec, err
}
