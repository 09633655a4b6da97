// Package projections holds the read models (one package each) and what
// operators do to all of them: rebuilding one from the log (rebuild.go).
package projections

import (
	"log/slog"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/cache"
	"github.com/printpod/pod/internal/stream"
	catalogrm "github.com/printpod/pod/projections/catalog"
	orderrm "github.com/printpod/pod/projections/order"
	"github.com/printpod/pod/schemas"
)

// Projection names a read model: its consumer, the (logical) topic it
// reads, the tables it owns, how it is rebuilt and what a rebuild announces
// once it is live.
type Projection struct {
	Consumer  string
	Topic     string
	Tables    []string
	Rebuilder func(schemas.Naming, *slog.Logger) stream.Consumer
	Announce  func(*pgx.Batch) // nil: nothing
}

// All are the read models podctl replay can rebuild, by name.
var All = map[string]Projection{
	"catalog": {Consumer: catalogrm.ConsumerName, Topic: schemas.TopicCatalogEvents, Tables: catalogrm.Tables,
		Rebuilder: catalogrm.Rebuilder, Announce: func(b *pgx.Batch) { cache.QueueAnnounce(b, catalogrm.CacheName) }},
	"orders": {Consumer: orderrm.ConsumerName, Topic: schemas.TopicOrderEvents, Tables: orderrm.Tables,
		Rebuilder: orderrm.Rebuilder},
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
