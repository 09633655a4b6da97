package app

import (
	"bytes"
	"context"
	"fmt"

	"github.com/printpod/pod/commands/catalog"
	"github.com/printpod/pod/deploy/demo"
	"github.com/printpod/pod/internal/accounts"
)

// DemoAccountName is the name of the account made outside production.
const DemoAccountName = "demo"

// loadDemo makes the demo account with the configured token (unless that
// token was revoked: it stays revoked) and publishes the demo catalog through the same path as `podctl catalog import`, once per
// catalog content: a restart with the same file publishes nothing.
func (a *App) loadDemo(ctx context.Context) error {
	st := accounts.Store{Pool: a.Pool}
	id, active, err := st.Ensure(ctx, DemoAccountName, a.Config.DemoToken)
	if err != nil {
		return fmt.Errorf("demo account: %w", err)
	}
	if !active {
		a.Log.Warn("the demo token (POD_DEMO_TOKEN) was revoked and stays revoked; configure another one, or issue one with podctl token issue",
			"account_id", id)
	}
	a.DemoAccount = id
	f, err := catalog.Parse(bytes.NewReader(demo.Catalog))
	if err != nil {
		return fmt.Errorf("demo catalog: %w", err)
	}
	res, err := catalog.Import(ctx, a.Pool, a.Producer, a.Naming, id, f, catalog.Options{Once: true}, nil)
	if err != nil {
		return fmt.Errorf("demo catalog: %w", err)
	}
	a.DemoOffsets = res.Offsets
	if res.Published {
		a.Log.Info("demo catalog published", "account_id", id, "stores", len(f.Stores))
	}
	return nil
}
