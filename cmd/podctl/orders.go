package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/commands/order"
	"github.com/printpod/pod/internal/logging"
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
			// An update met while a push is unsettled is held in the
			// order's state until a push succeeds (order.Hold), and its
			// decision says so, tracking-only updates too (found by review:
			// one was told from the order's status, and a held tracking
			// number read as applied).
			held := dec.Message == order.ErrHeld.Error()
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
	var limit time.Duration
	var quiet, truncated bool
	cmd := &cobra.Command{
		Use:   "replay --projection NAME",
		Short: "Rebuild a read model from the log (" + fmt.Sprint(projections.Names()) + ")",
		Long: "Rebuilds the read model from the start of its topic beside the live one, with a\n" +
			"progress bar, and swaps it in once it has caught up: requests read the whole live\n" +
			"read model until then. Interrupted, it goes on from where it stopped when run again.\n" +
			"It refuses, changing nothing, when retention has deleted the start of the topic:\n" +
			"the rebuilt read model would lack those records (--from-truncated-log accepts that).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, ok := projections.All[name]
			if !ok {
				return fmt.Errorf("--projection must be one of %v", projections.Names())
			}
			ctx := cmd.Context()
			if limit > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, limit)
				defer cancel()
			}
			e, err := openKafkaEnv(ctx)
			if err != nil {
				return err
			}
			defer e.close()
			if !truncated {
				if err := wholeLog(ctx, kadm.NewClient(e.kafka), e.cfg.Naming().Topic(p.Topic)); err != nil {
					return err
				}
			}
			errw := cmd.ErrOrStderr()
			var bar *progressbar.ProgressBar
			var last projections.Progress
			r := &projections.Rebuild{Pool: e.pool, Brokers: e.brokers, Producer: e.kafka, Naming: e.cfg.Naming(),
				Log: logging.New(errw, "warn"),
				Progress: func(pr projections.Progress) {
					if quiet {
						last = pr
						return
					}
					if bar == nil {
						if pr.Resumed {
							fmt.Fprintln(errw, "going on with the rebuild an earlier run left")
						}
						bar = progressbar.NewOptions64(pr.Total, progressbar.OptionSetWriter(errw),
							progressbar.OptionSetDescription("replaying "+name), progressbar.OptionShowCount(),
							progressbar.OptionShowIts(), progressbar.OptionSetItsString("records"))
					}
					if pr.Phase != last.Phase && pr.Phase == projections.PhaseCatchingUp {
						bar.Describe("replaying " + name + ", catching up with the live projector")
					}
					if pr.Applied > bar.GetMax64() {
						bar.ChangeMax64(pr.Applied)
					}
					_ = bar.Set64(pr.Applied)
					if pr.Phase == projections.PhaseSwapped {
						_ = bar.Finish()
						fmt.Fprintln(errw)
					}
					last = pr
				}}
			if err := r.Run(ctx, name); err != nil {
				if bar != nil {
					fmt.Fprintln(errw)
				}
				return err
			}
			return printJSON(cmd.OutOrStdout(), map[string]any{"projection": name, "records": last.Applied,
				"resumed": last.Resumed, "rebuilt": true})
		},
	}
	cmd.Flags().StringVar(&name, "projection", "", "read model to rebuild: "+fmt.Sprint(projections.Names()))
	cmd.Flags().DurationVar(&limit, "wait", 0, "stop after this long, to go on at the next run (0 = no limit)")
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
