package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/printpod/pod/commands/catalog"
	"github.com/printpod/pod/internal/pg"
	catalogrm "github.com/printpod/pod/projections/catalog"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

func catalogCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "catalog", Short: "Manage store catalogs"}
	var (
		account string
		wait    time.Duration
		quiet   bool
		archive bool
	)
	imp := &cobra.Command{
		Use:   "import --account ID [--archive-missing] FILE",
		Short: "Publish a catalog file (stores, products, variants) for an account",
		Long: "Validates FILE, publishes it as catalog events and waits until the catalog\n" +
			"projection has applied them (so the API serves the new catalog when it returns).\n" +
			"Importing the same file again is harmless. A file naming a store of another\n" +
			"account, or a product or variant of another store or product, is refused\n" +
			"and nothing is published. A product left out of a file stays as it was, unless\n" +
			"--archive-missing is given: then each product of the file's stores that the\n" +
			"catalog holds and the file does not list is archived (no longer orderable).\n" +
			"Both checks read the catalog projection: the import first waits (up to --wait,\n" +
			"two minutes if 0 with --archive-missing) until it has applied every catalog event\n" +
			"published before. With --wait 0 and no --archive-missing it does not wait, and the\n" +
			"owners are checked on the projection as it is. One import of an account runs at a\n" +
			"time; a second is refused while the first runs.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(account)
			if err != nil {
				return fmt.Errorf("--account: %q is not a UUID", account)
			}
			fh, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer fh.Close()
			f, err := catalog.Parse(fh)
			if err != nil {
				return fmt.Errorf("%s is not a valid catalog:\n%w", args[0], err)
			}
			e, err := openKafkaEnv(cmd.Context())
			if err != nil {
				return err
			}
			defer e.close()
			cl := e.kafka

			var bar *progressbar.ProgressBar
			progress := func(done, total int) {
				if quiet {
					return
				}
				if bar == nil {
					bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(cmd.ErrOrStderr()),
						progressbar.OptionSetDescription("publishing"), progressbar.OptionShowCount(),
						progressbar.OptionShowIts(), progressbar.OptionSetItsString("events"))
				}
				_ = bar.Set(done)
			}
			// One import of an account at a time: two of one store
			// interleaved their events, each checked against a
			// projection without the other's, and the store ended as a
			// mix of both files (found by review).
			unlock, held, err := pg.TryLock(cmd.Context(), e.pool, "podctl.catalog-import "+id.String())
			if err != nil {
				return err
			}
			if !held {
				return fmt.Errorf("nothing was published: another catalog import of account %s is running; run this one once it has ended", id)
			}
			defer unlock()
			if archive || wait > 0 {
				// Who owns a store, product or variant, and what to
				// archive, are read from the catalog projection: it must
				// hold every event published so far, or an item another
				// import just published would be missed (found by review:
				// another account's store, not projected yet, passed the
				// owner check, and the projector dropped this file's).
				limit := wait
				if limit <= 0 {
					limit = 2 * time.Minute
				}
				err := waitCatalog(cmd, quiet, "earlier catalog events", limit, func(ctx context.Context) error {
					return catalogrm.WaitCaughtUp(ctx, e.pool, e.kafka, e.cfg.Naming())
				})
				if err != nil {
					return fmt.Errorf("nothing was published: the import checks the catalog projection, caught up, but %w "+
						"(is podsvc with the projector role running?)", err)
				}
			}
			res, err := catalog.Import(cmd.Context(), e.pool, cl, e.cfg.Naming(), id, f, catalog.Options{ArchiveMissing: archive}, progress)
			if bar != nil {
				_ = bar.Finish()
				fmt.Fprintln(cmd.ErrOrStderr())
			}
			if err != nil {
				return err
			}
			if wait > 0 {
				err := waitCatalog(cmd, quiet, "the events", wait, func(ctx context.Context) error {
					return catalogrm.WaitProjected(ctx, e.pool, e.cfg.Naming(), res.Offsets)
				})
				if err != nil {
					return fmt.Errorf("published %d events, but %w (is podsvc with the projector role running?)", res.Events, err)
				}
			}
			products := 0
			for _, s := range f.Stores {
				products += len(s.Products)
			}
			return printJSON(cmd.OutOrStdout(), map[string]any{
				"account_id": id, "stores": len(f.Stores), "products": products, "archived": res.Archived, "events": res.Events,
				"projected": wait > 0,
			})
		},
	}
	imp.Flags().StringVar(&account, "account", "", "account id that owns the stores")
	imp.Flags().DurationVar(&wait, "wait", 2*time.Minute, "wait up to this long for the projection (0 = do not wait)")
	imp.Flags().BoolVar(&quiet, "quiet", false, "no progress output")
	imp.Flags().BoolVar(&archive, "archive-missing", false, "archive the products of the file's stores that the file does not list")
	_ = imp.MarkFlagRequired("account")
	cmd.AddCommand(imp)
	return cmd
}

// waitCatalog runs f with limit to wait for the catalog projection to
// apply what, saying so unless quiet.
func waitCatalog(cmd *cobra.Command, quiet bool, what string, limit time.Duration, f func(context.Context) error) error {
	if !quiet {
		fmt.Fprintf(cmd.ErrOrStderr(), "waiting for the catalog projection to apply %s...\n", what)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), limit)
	defer cancel()
	return f(ctx)
}
