package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/kafka"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/internal/wait"
	"github.com/printpod/pod/projections"
	"github.com/printpod/pod/schemas"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

func fulfillmentCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "fulfillment", Short: "Production and carrier updates of orders"}
	var orderID, status string
	var tr schemas.Tracking
	var decide time.Duration
	pub := &cobra.Command{
		Use:   "publish --order ID [--status SYNCED|FULFILLED] [--tracking-number N --carrier C --tracking-url U --shipment-status S]",
		Short: "Publish a fulfillment update to pod.fulfillment.updates",
		Long: "SYNCED: the production system acknowledged the order (from SUCCESS).\n" +
			"FULFILLED: it shipped (from SUCCESS or SYNCED). Tracking fields set or change the\n" +
			"order's tracking (tracking.created / tracking.updated events). podctl waits for the\n" +
			"order decider's decision and exits non-zero, with the reason, when it refused the\n" +
			"update (an unknown order, a status the order cannot move to). A status update that\n" +
			"comes once a push of the order began and before one succeeded is held (\"held\": true),\n" +
			"and applies when a push succeeds.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := uuid.Parse(orderID)
			if err != nil {
				return fmt.Errorf("--order: %q is not a UUID", orderID)
			}
			u := schemas.FulfillmentUpdate{ID: uuid.New(), OrderID: id, Status: status, SentAt: time.Now().UTC()}
			if tr != (schemas.Tracking{}) {
				t := tr
				u.Tracking = &t
			}
			if u.Status == "" && u.Tracking == nil {
				return fmt.Errorf("nothing to publish: give --status and/or tracking flags")
			}
			if err := order.ValidateFulfillment(u); err != nil {
				return fmt.Errorf("not published: %w", err)
			}
			e, err := openKafkaEnv(cmd.Context())
			if err != nil {
				return err
			}
			defer e.close()
			cl := e.kafka
			if err := order.PublishFulfillment(cmd.Context(), cl, e.cfg.Naming(), u); err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			if decide <= 0 {
				return printJSON(cmd.OutOrStdout(), u)
			}
			dec, err := awaitDecision(cmd, e, order.FulfillmentCommandID(u.ID), decide)
			if err != nil {
				return fmt.Errorf("update %s was published, but %w (is podsvc with the decider role running?)", u.ID, err)
			}
			if !dec.Accepted() {
				return fmt.Errorf("update %s was published and refused: %s: %s", u.ID, dec.Code, dec.Message)
			}
			// A status accepted and not taken is held in the order's state
			// until a push succeeds (order.Hold); a SYNCED after FULFILLED
			// is passed, not held.
			held := u.Status != "" && dec.Status != schemas.StatusSynced && dec.Status != schemas.StatusFulfilled
			if held {
				fmt.Fprintf(cmd.ErrOrStderr(), "order %s is %s: the update is held, and applies when a push of the order succeeds\n", u.OrderID, dec.Status)
			}
			return printJSON(cmd.OutOrStdout(), struct {
				schemas.FulfillmentUpdate
				OrderStatus string `json:"order_status"`
				Held        bool   `json:"held"`
			}{u, dec.Status, held})
		},
	}
	pub.Flags().DurationVar(&decide, "wait", 30*time.Second, "wait up to this long for the order decider's decision (0 = do not wait)")
	pub.Flags().StringVar(&orderID, "order", "", "order id")
	pub.Flags().StringVar(&status, "status", "", "SYNCED or FULFILLED")
	pub.Flags().StringVar(&tr.TrackingNumber, "tracking-number", "", "carrier tracking number")
	pub.Flags().StringVar(&tr.Carrier, "carrier", "", "carrier name")
	pub.Flags().StringVar(&tr.TrackingURL, "tracking-url", "", "tracking page URL")
	pub.Flags().StringVar(&tr.ShipmentStatus, "shipment-status", "", "shipment status, e.g. in_transit, delivered")
	_ = pub.MarkFlagRequired("order")
	cmd.AddCommand(pub)
	return cmd
}

// wholeLog fails when retention has deleted the first records of a
// partition of topic: a read model rebuilt from it would lack them.
func wholeLog(ctx context.Context, adm *kadm.Client, topic string) error {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("read the log start of %s: %w", topic, err)
	}
	var cut []string
	starts.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			cut = append(cut, fmt.Sprintf("partition %d at offset %d", o.Partition, o.Offset))
		}
	})
	if len(cut) == 0 {
		return nil
	}
	slices.Sort(cut)
	return fmt.Errorf("the log of %s no longer holds its first records (it starts at %s): retention deleted them, "+
		"and a rebuilt read model would lack what they made. Nothing was reset; --from-truncated-log replays what is left",
		topic, strings.Join(cut, ", "))
}

func replayCmd() *cobra.Command {
	var name string
	var wait time.Duration
	var quiet, truncated bool
	cmd := &cobra.Command{
		Use:   "replay --projection NAME",
		Short: "Rebuild a read model from the log (" + fmt.Sprint(projections.Names()) + ")",
		Long: "Empties the read model and its stored offsets in one transaction; the projector\n" +
			"of a running podsvc then rebuilds it from the start of the topic. podctl waits,\n" +
			"with a progress bar, until the rebuild reaches the log end seen at the start.\n" +
			"It refuses, resetting nothing, when retention has deleted the start of the topic:\n" +
			"the rebuilt read model would lack those records (--from-truncated-log accepts that).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, ok := projections.All[name]
			if !ok {
				return fmt.Errorf("--projection must be one of %v", projections.Names())
			}
			ctx := cmd.Context()
			e, err := openKafkaEnv(ctx)
			if err != nil {
				return err
			}
			defer e.close()
			cl := e.kafka
			if !truncated {
				if err := wholeLog(ctx, kadm.NewClient(cl), e.cfg.Naming().Topic(p.Topic)); err != nil {
					return err
				}
			}
			last, total, err := kafka.LastOffsets(ctx, kadm.NewClient(cl), e.cfg.Naming().Topic(p.Topic))
			if err != nil {
				return err
			}
			if err := projections.Reset(ctx, e.pool, name); err != nil {
				return err
			}
			if wait <= 0 {
				return printJSON(cmd.OutOrStdout(), map[string]any{"projection": name, "reset": true, "records": total})
			}
			var bar *progressbar.ProgressBar
			if !quiet {
				bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(cmd.ErrOrStderr()),
					progressbar.OptionSetDescription("replaying "+name), progressbar.OptionShowCount(),
					progressbar.OptionShowIts(), progressbar.OptionSetItsString("records"))
			}
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- stream.WaitApplied(wctx, e.pool, p.Consumer, e.cfg.Naming().Topic(p.Topic), last) }()
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case err := <-done:
					if bar != nil {
						_ = bar.Set64(total)
						_ = bar.Finish()
						fmt.Fprintln(cmd.ErrOrStderr())
					}
					if err != nil {
						return fmt.Errorf("the read model was reset, but %w (is podsvc with the projector role running?)", err)
					}
					return printJSON(cmd.OutOrStdout(), map[string]any{"projection": name, "reset": true, "records": total, "rebuilt": true})
				case <-tick.C:
					if bar != nil {
						if n, err := projections.Applied(ctx, e.pool, e.cfg.Naming(), name); err == nil {
							_ = bar.Set64(min(n, total))
						}
					}
				}
			}
		},
	}
	cmd.Flags().StringVar(&name, "projection", "", "read model to rebuild: "+fmt.Sprint(projections.Names()))
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Minute, "wait up to this long for the rebuild (0 = do not wait)")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "no progress output")
	cmd.Flags().BoolVar(&truncated, "from-truncated-log", false, "replay even when retention deleted the topic's first records")
	_ = cmd.MarkFlagRequired("projection")
	return cmd
}

// awaitDecision waits up to limit for the decision of the order command id,
// looking it up every 200 ms.
func awaitDecision(cmd *cobra.Command, e *env, id uuid.UUID, limit time.Duration) (order.Decision, error) {
	fmt.Fprintln(cmd.ErrOrStderr(), "waiting for the order decider's decision...")
	ctx, cancel := context.WithTimeout(cmd.Context(), limit)
	defer cancel()
	var dec order.Decision
	err := wait.Until[struct{}](ctx, nil, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		d, ok, err := order.LoadDecision(ctx, e.pool, id)
		dec = d
		return ok, err
	})
	if err != nil {
		return order.Decision{}, fmt.Errorf("its decision did not come within %s: %w", limit, err)
	}
	return dec, nil
}
