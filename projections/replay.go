// Package projections holds the read models (one package each) and what
// operators do to all of them: rebuilding one from the log.
package projections

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	catalogrm "github.com/printpod/pod/projections/catalog"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
)

// Projection names a read model: its consumer, the (logical) topic it
// reads and the tables it owns.
type Projection struct {
	Consumer string
	Topic    string
	Tables   []string
}

// All are the read models podctl replay can rebuild, by name.
var All = map[string]Projection{
	"catalog": {Consumer: catalogrm.ConsumerName, Topic: schemas.TopicCatalogEvents, Tables: catalogrm.Tables},
	"orders":  {Consumer: orderrm.ConsumerName, Topic: schemas.TopicOrderEvents, Tables: orderrm.Tables},
}

// ByConsumer names the read model the consumer builds ("" and false for
// a consumer that is not one podctl replay rebuilds).
func ByConsumer(consumer string) (string, bool) {
	for name, p := range All {
		if p.Consumer == consumer {
			return name, true
		}
	}
	return "", false
}

// Names lists the projection names, sorted.
func Names() []string {
	var out []string
	for n := range All {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Reset empties a read model and forgets its stored offsets in one
// transaction. A running projector notices the offsets are gone and
// rebuilds from the start of the log; a stopped one does at its next start.
// The offset rows are locked first, so a batch in flight finishes before
// the tables are emptied.
func Reset(ctx context.Context, pool *pgxpool.Pool, name string) error {
	p, ok := All[name]
	if !ok {
		return fmt.Errorf("unknown projection %q (known: %v)", name, Names())
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM consumer_offsets WHERE consumer = $1 FOR UPDATE`, p.Consumer); err != nil {
			return err
		}
		tables := make([]string, len(p.Tables))
		for i, t := range p.Tables {
			tables[i] = pgx.Identifier{t}.Sanitize()
		}
		if _, err := tx.Exec(ctx, `TRUNCATE `+strings.Join(tables, ", ")); err != nil {
			return fmt.Errorf("empty %s: %w", name, err)
		}
		_, err := tx.Exec(ctx, `DELETE FROM consumer_offsets WHERE consumer = $1`, p.Consumer)
		return err
	})
}

// Applied is how many records of the projection's topic it has applied
// (the sum of its stored next offsets).
func Applied(ctx context.Context, pool *pgxpool.Pool, n schemas.Naming, name string) (int64, error) {
	p := All[name]
	var applied int64
	err := pool.QueryRow(ctx, `SELECT COALESCE(sum(next_offset), 0) FROM consumer_offsets WHERE consumer = $1 AND topic = $2`,
		p.Consumer, n.Topic(p.Topic)).Scan(&applied)
	return applied, err
}
