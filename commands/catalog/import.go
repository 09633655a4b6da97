package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Result tells what Import did.
type Result struct {
	// Published is false when once was set and the content was already published.
	Published bool
	// Events is how many events were published.
	Events int
	// Offsets is the highest acknowledged offset per partition; wait for the
	// projection to pass them (projections/catalog.WaitProjected) to read the
	// imported catalog back.
	Offsets map[int32]int64
}

// Import publishes f for account. With once set, a file whose content was
// already published for the account is skipped. The account must exist.
func Import(ctx context.Context, pool *pgxpool.Pool, cl *kgo.Client, account uuid.UUID, f File, once bool, progress Progress) (Result, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE account_id = $1)`, account).Scan(&exists); err != nil {
		return Result{}, fmt.Errorf("find account: %w", err)
	}
	if !exists {
		return Result{}, fmt.Errorf("no account %s", account)
	}
	digest := Digest(f)
	if once {
		var done bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM catalog_loads WHERE account_id = $1 AND digest = $2)`,
			account, digest).Scan(&done); err != nil {
			return Result{}, fmt.Errorf("check catalog loads: %w", err)
		}
		if done {
			return Result{}, nil
		}
	}
	events, err := f.Events(account, time.Now())
	if err != nil {
		return Result{}, err
	}
	offsets, err := Publish(ctx, cl, events, progress)
	if err != nil {
		return Result{}, err
	}
	// Recorded after publishing: a crash in between publishes again, which is
	// harmless because every event states a whole item.
	if _, err := pool.Exec(ctx, `INSERT INTO catalog_loads (account_id, digest) VALUES ($1, $2)
		ON CONFLICT DO NOTHING`, account, digest); err != nil {
		return Result{}, fmt.Errorf("record catalog load: %w", err)
	}
	return Result{Published: true, Events: len(events), Offsets: offsets}, nil
}
