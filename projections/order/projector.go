// Package order builds the order read models (list, detail, push attempts,
// queue) from pod.order.events and answers the queries the GET endpoints
// make.
package order

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	json "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/printpod/pod/internal/codec"
	"github.com/printpod/pod/internal/stream"
	"github.com/printpod/pod/projections/held"
	"github.com/printpod/pod/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumerName is the projector's consumer group and offsets key.
const ConsumerName = "projections.orders"

// NotifyProjected is the Postgres channel on which the projector announces
// an order it changed (payload: the order id).
const NotifyProjected = "order_projected"

// Tables are the read model tables this projector owns (a rebuild,
// projections.Rebuild, makes them again and swaps them in).
var Tables = []string{"order_push_attempts", "orders", "store_queues", "order_status_counts"}

// Projector returns the consumer that builds the order read model. Every
// event applies only over an older version of its order (record header),
// so an event published twice is applied once. A batch is applied with a
// fixed handful of statements whatever its size: one round trip locks the
// batch's stores' queue counts and reads its orders, the events are
// applied in order in memory (queue places and counts move as they would
// one by one), and the results are written with unnest.
func Projector(n schemas.Naming, _ *slog.Logger) stream.Consumer {
	return projector(n, announce)
}

// Rebuilder is the projector that writes a rebuild of the read model
// beside the live one (projections.Rebuild): the same writes, with their
// announcements held until the swap (package held), since requests read
// the live read model until then.
func Rebuilder(n schemas.Naming, _ *slog.Logger) stream.Consumer {
	return projector(n, holder(n.Topic(schemas.TopicOrderEvents)))
}

func projector(n schemas.Naming, announce announcer) stream.Consumer {
	return stream.Consumer{
		Name:   ConsumerName,
		Topics: []string{n.Topic(schemas.TopicOrderEvents)},
		Handle: stream.Sink(func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
			items := make([]item, 0, len(recs))
			for _, rec := range recs {
				// A record that cannot be decoded is dead-lettered by the
				// runner; the rest go on.
				ev, err := schemas.ParseEvent(rec.Value)
				if err != nil {
					return stream.Poison(fmt.Errorf("order event record %d/%d: %w", rec.Partition, rec.Offset, err))
				}
				it := item{ev: ev, version: schemas.OrderVersion(rec.Headers), partition: rec.Partition, offset: rec.Offset}
				if err := ev.Decode(&it.data); err != nil {
					return stream.Poison(fmt.Errorf("order event %s: %w", ev.ID, err))
				}
				if it.version <= 0 {
					return stream.Poison(fmt.Errorf("order event %s has no version header", ev.ID))
				}
				items = append(items, it)
			}
			return apply(ctx, tx, items, announce)
		}),
	}
}

type item struct {
	ev        schemas.Event
	data      schemas.OrderEventData
	version   int
	partition int32
	offset    int64
}

// row is an order of the batch as the read model holds it.
type row struct {
	existed bool // in the table before the batch (else created by it)
	changed bool
	id      uuid.UUID
	store   uuid.UUID
	status  string
	was     string // its status before the batch
	version int
	entry   *int64 // place taken when it last entered its store's queue
	seq     *int64 // the store's sequence number of that entry
	queued  time.Time
	updated time.Time
	// set by the batch; nil keeps the stored value
	platformID, platformNumber *string
	tracking                   *schemas.Tracking
	shipment                   *string
	trackingSet                bool
	created                    *item // the order.created event of a new row
}

// queue is a store's queue as the batch moves it: its PENDING count, the
// sequence number of its last entry, its frontier (every entry up to it
// has left) and the entries beyond the frontier that left out of turn.
type queue struct {
	pending, next, frontier int64
	departed                map[int64]bool
}

func (q *queue) enter() (seq, place int64) {
	q.next++
	q.pending++
	return q.next, q.pending
}

// leave takes the entry seq out of the queue: the frontier moves past it
// and past every out-of-turn departure it now reaches.
func (q *queue) leave(seq *int64) {
	q.pending--
	if seq == nil || *seq <= q.frontier {
		return
	}
	if *seq != q.frontier+1 {
		q.departed[*seq] = true
		return
	}
	q.frontier++
	for q.departed[q.frontier+1] {
		delete(q.departed, q.frontier+1)
		q.frontier++
	}
}

type attemptKey struct {
	order   uuid.UUID
	attempt int
}

type finish struct {
	at      time.Time
	outcome string
	err     string
}

func apply(ctx context.Context, tx pgx.Tx, items []item, announce announcer) error {
	if len(items) == 0 {
		return nil
	}
	var ids, stores []uuid.UUID
	seenID, seenStore := map[uuid.UUID]bool{}, map[uuid.UUID]bool{}
	for _, it := range items {
		o := it.data.Order
		if !seenID[o.ID] {
			seenID[o.ID] = true
			ids = append(ids, o.ID)
		}
		if o.StoreID != uuid.Nil && !seenStore[o.StoreID] {
			seenStore[o.StoreID] = true
			stores = append(stores, o.StoreID)
		}
	}
	// The stores are locked first, in one sorted statement: replicas working
	// other partitions then wait for each other instead of deadlocking.
	slices.SortFunc(stores, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	queues := make(map[uuid.UUID]*queue, len(stores))
	for _, id := range stores {
		queues[id] = &queue{departed: map[int64]bool{}}
	}
	rows := make(map[uuid.UUID]*row, len(ids))
	read := &pgx.Batch{}
	// A store's row is created in a statement of its own: the locking read
	// that follows takes a new snapshot, so it sees a row another projector
	// created and committed meanwhile (one statement's parts share a
	// snapshot, and the read would start that store from zero).
	read.Queue(`INSERT INTO store_queues (store_id, pending) SELECT s, 0 FROM unnest($1::uuid[]) AS s
		ORDER BY s ON CONFLICT (store_id) DO NOTHING`, stores)
	read.Queue(`SELECT store_id, pending, next_seq, frontier, departed FROM store_queues WHERE store_id = ANY($1)
		ORDER BY store_id FOR UPDATE`, stores).
		Query(func(rs pgx.Rows) error {
			var id uuid.UUID
			var pending, next, frontier int64
			var departed []int64
			_, err := pgx.ForEachRow(rs, []any{&id, &pending, &next, &frontier, &departed}, func() error {
				q := queues[id]
				q.pending, q.next, q.frontier = pending, next, frontier
				for _, seq := range departed {
					q.departed[seq] = true
				}
				return nil
			})
			return err
		})
	read.Queue(`SELECT order_id, store_id, status, version, entry_position, queue_seq, queued_at, updated_at FROM orders
		WHERE order_id = ANY($1) FOR UPDATE`, ids).
		Query(func(rs pgx.Rows) error {
			var r row
			_, err := pgx.ForEachRow(rs, []any{&r.id, &r.store, &r.status, &r.version, &r.entry, &r.seq, &r.queued, &r.updated}, func() error {
				c := r
				c.existed, c.was = true, c.status
				rows[c.id] = &c
				return nil
			})
			return err
		})
	if err := tx.SendBatch(ctx, read).Close(); err != nil {
		return fmt.Errorf("read orders: %w", err)
	}

	starts := map[attemptKey]time.Time{}
	finishes := map[attemptKey]finish{}
	var startOrder, finishOrder []attemptKey
	moved := map[uuid.UUID]bool{} // stores whose count changed
	for i := range items {
		it := &items[i]
		o := it.data.Order
		r := rows[o.ID]
		if r != nil && it.version <= r.version {
			continue // applied already
		}
		at := it.ev.OccurredAt
		switch it.ev.Type {
		case schemas.TypeOrderCreated:
			if r != nil || it.data.Created == nil {
				continue
			}
			// The order enters its store's queue last: its place is the
			// queue's length with it, and the store's count grows by one.
			q := queues[o.StoreID]
			if q == nil {
				continue // an event without a store: nothing to queue it in
			}
			seq, place := q.enter()
			moved[o.StoreID] = true
			rows[o.ID] = &row{changed: true, id: o.ID, store: o.StoreID, status: schemas.StatusPending, version: it.version,
				entry: &place, seq: &seq, queued: o.CreatedAt, updated: o.UpdatedAt, created: it}
		case schemas.TypeOrderStatusUpdated, schemas.TypeOrderCancelled:
			if r == nil {
				continue
			}
			to := schemas.StatusCancelled
			if o.ClientStatus != nil {
				to = *o.ClientStatus
			}
			was := r.status
			r.status, r.updated, r.version, r.changed = to, o.UpdatedAt, it.version, true
			if to == schemas.StatusPending {
				r.queued = at
			}
			// Entering or leaving PENDING moves the store's queue count with
			// it; an order entering takes the last place.
			q := queues[r.store]
			switch {
			case q == nil:
			case to == schemas.StatusPending && was != schemas.StatusPending:
				seq, place := q.enter()
				r.entry, r.seq = &place, &seq
				moved[r.store] = true
			case to != schemas.StatusPending && was == schemas.StatusPending:
				q.leave(r.seq)
				moved[r.store] = true
			}
			p := it.data.Push
			if p == nil {
				continue
			}
			k := attemptKey{o.ID, p.Attempt}
			switch to {
			case schemas.StatusProcessing:
				if _, ok := starts[k]; !ok {
					starts[k] = at
					startOrder = append(startOrder, k)
				}
			case schemas.StatusSuccess, schemas.StatusFailed:
				outcome := "success"
				if to == schemas.StatusFailed {
					outcome = "failed"
				} else {
					r.platformID, r.platformNumber = nonEmpty(p.PlatformOrderID), nonEmpty(p.PlatformOrderNumber)
				}
				if _, ok := finishes[k]; !ok {
					finishOrder = append(finishOrder, k)
				}
				finishes[k] = finish{at: at, outcome: outcome, err: p.Error}
			}
		case schemas.TypeTrackingCreated, schemas.TypeTrackingUpdated:
			if r == nil {
				continue
			}
			r.tracking, r.shipment, r.trackingSet = it.data.Tracking, o.ShipmentStatus, true
			r.updated, r.version, r.changed = o.UpdatedAt, it.version, true
		}
	}

	write := &pgx.Batch{}
	var news, olds []*row
	for _, id := range ids {
		if r := rows[id]; r != nil && r.changed {
			if r.existed {
				olds = append(olds, r)
			} else {
				news = append(news, r)
			}
		}
	}
	if err := queueInserts(write, news); err != nil {
		return err
	}
	if err := queueUpdates(write, olds); err != nil {
		return err
	}
	queueAttempts(write, startOrder, starts, finishOrder, finishes)
	queueStatusCounts(write, news, olds)
	queueQueues(write, moved, queues)
	announce(write, append(news, olds...), items)
	if err := tx.SendBatch(ctx, write).Close(); err != nil {
		return fmt.Errorf("apply order events: %w", err)
	}
	return nil
}

func queueInserts(b *pgx.Batch, rs []*row) error {
	if len(rs) == 0 {
		return nil
	}
	n := len(rs)
	ids, accounts, stores, keys := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n)
	refs, statuses, via, shipping := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	dup := make([]bool, n)
	addons, pricing, customer, address, lines := make([]string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	label, trackNo, note, tags := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	queued, created, updated := make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	versions := make([]int32, n)
	entries, seqs := make([]*int64, n), make([]*int64, n)
	platformID, platformNumber, tracking, shipment := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	for i, r := range rs {
		o, c := r.created.data.Order, r.created.data.Created
		seqs[i] = r.seq
		ids[i], accounts[i], stores[i], keys[i] = o.ID, o.AccountID, o.StoreID, c.IdempotencyKey
		refs[i], statuses[i], via[i], shipping[i], dup[i] = o.ReferenceID, r.status, c.CreatedVia, c.ShippingService, c.Duplicate
		a, err := codec.Marshal(nonNil(c.AddonService))
		if err != nil {
			return err
		}
		addons[i] = string(a)
		pricing[i], customer[i], address[i], lines[i] = jsonText(c.Pricing), jsonText(c.Customer), jsonText(c.ShippingAddress), jsonText(c.Lines)
		label[i], trackNo[i], note[i], tags[i] = nonEmpty(c.LabelLink), nonEmpty(c.TrackingNumber), nonEmpty(c.Note), nonEmpty(c.Tags)
		queued[i], created[i], updated[i] = r.queued, o.CreatedAt, r.updated
		versions[i], entries[i] = int32(r.version), r.entry
		platformID[i], platformNumber[i], shipment[i] = r.platformID, r.platformNumber, r.shipment
		if tracking[i], err = trackingText(r); err != nil {
			return err
		}
	}
	b.Queue(`INSERT INTO orders (order_id, account_id, store_id, reference_id, status, duplicate, addon_service, pricing,
			created_via, customer, shipping_address, label_link, tracking_number, shipping_service, note, tags, line_items,
			idempotency_key, queued_at, created_at, updated_at, version, entry_position, platform_order_id,
			platform_order_number, tracking, shipment_status, queue_seq)
		SELECT id, account, store, ref, status, dup, ARRAY(SELECT json_array_elements_text(addons::json)), pricing::json,
			via, customer::json, address::json, label, track_no, shipping, note, tags, lines::json,
			key, queued, created, updated, version, entry, platform_id, platform_number, tracking::jsonb, shipment, seq
		FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::bool[], $7::text[], $8::text[],
			$9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[],
			$18::uuid[], $19::timestamptz[], $20::timestamptz[], $21::timestamptz[], $22::int[], $23::bigint[], $24::text[],
			$25::text[], $26::text[], $27::text[], $28::bigint[])
			AS o(id, account, store, ref, status, dup, addons, pricing, via, customer, address, label, track_no, shipping,
			note, tags, lines, key, queued, created, updated, version, entry, platform_id, platform_number, tracking, shipment, seq)
		ON CONFLICT (order_id) DO NOTHING`,
		ids, accounts, stores, refs, statuses, dup, addons, pricing, via, customer, address, label, trackNo, shipping,
		note, tags, lines, keys, queued, created, updated, versions, entries, platformID, platformNumber, tracking, shipment, seqs)
	return nil
}

func queueUpdates(b *pgx.Batch, rs []*row) error {
	if len(rs) == 0 {
		return nil
	}
	n := len(rs)
	ids := make([]uuid.UUID, n)
	statuses := make([]string, n)
	versions := make([]int32, n)
	entries, seqs := make([]*int64, n), make([]*int64, n)
	queued, updated := make([]time.Time, n), make([]time.Time, n)
	platformID, platformNumber, tracking, shipment := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	trackingSet := make([]bool, n)
	for i, r := range rs {
		ids[i], statuses[i], versions[i], entries[i], seqs[i] = r.id, r.status, int32(r.version), r.entry, r.seq
		queued[i], updated[i] = r.queued, r.updated
		platformID[i], platformNumber[i], shipment[i], trackingSet[i] = r.platformID, r.platformNumber, r.shipment, r.trackingSet
		var err error
		if tracking[i], err = trackingText(r); err != nil {
			return err
		}
	}
	b.Queue(`UPDATE orders o SET status = u.status, version = u.version, entry_position = u.entry, queue_seq = u.seq,
			queued_at = u.queued, updated_at = u.updated,
			platform_order_id = COALESCE(u.platform_id, o.platform_order_id),
			platform_order_number = COALESCE(u.platform_number, o.platform_order_number),
			tracking = CASE WHEN u.tracking_set THEN u.tracking::jsonb ELSE o.tracking END,
			shipment_status = CASE WHEN u.tracking_set THEN u.shipment ELSE o.shipment_status END
		FROM unnest($1::uuid[], $2::text[], $3::int[], $4::bigint[], $5::timestamptz[], $6::timestamptz[], $7::text[],
			$8::text[], $9::text[], $10::text[], $11::bool[], $12::bigint[])
			AS u(id, status, version, entry, queued, updated, platform_id, platform_number, tracking, shipment, tracking_set, seq)
		WHERE o.order_id = u.id AND o.version < u.version`,
		ids, statuses, versions, entries, queued, updated, platformID, platformNumber, tracking, shipment, trackingSet, seqs)
	return nil
}

func queueAttempts(b *pgx.Batch, startOrder []attemptKey, starts map[attemptKey]time.Time, finishOrder []attemptKey, finishes map[attemptKey]finish) {
	if len(startOrder) > 0 {
		ids, attempts, at := make([]uuid.UUID, len(startOrder)), make([]int32, len(startOrder)), make([]time.Time, len(startOrder))
		for i, k := range startOrder {
			ids[i], attempts[i], at[i] = k.order, int32(k.attempt), starts[k]
		}
		b.Queue(`INSERT INTO order_push_attempts (order_id, attempt, started_at)
			SELECT a.id, a.attempt, a.at FROM unnest($1::uuid[], $2::int[], $3::timestamptz[]) AS a(id, attempt, at)
			WHERE EXISTS (SELECT 1 FROM orders WHERE order_id = a.id) ON CONFLICT DO NOTHING`, ids, attempts, at)
	}
	if len(finishOrder) > 0 {
		n := len(finishOrder)
		ids, attempts, at := make([]uuid.UUID, n), make([]int32, n), make([]time.Time, n)
		outcomes, errs := make([]string, n), make([]string, n)
		for i, k := range finishOrder {
			f := finishes[k]
			ids[i], attempts[i], at[i], outcomes[i], errs[i] = k.order, int32(k.attempt), f.at, f.outcome, f.err
		}
		b.Queue(`UPDATE order_push_attempts p SET finished_at = f.at, outcome = f.outcome, error = NULLIF(f.err, '')
			FROM unnest($1::uuid[], $2::int[], $3::timestamptz[], $4::text[], $5::text[]) AS f(id, attempt, at, outcome, err)
			WHERE p.order_id = f.id AND p.attempt = f.attempt`, ids, attempts, at, outcomes, errs)
	}
}

// queueStatusCounts moves the per-status order counts by the batch's new
// and changed orders, in status order (so projectors working other
// partitions lock the count rows in one order and never deadlock).
func queueStatusCounts(b *pgx.Batch, news, olds []*row) {
	delta := map[string]int64{}
	for _, r := range news {
		delta[r.status]++
	}
	for _, r := range olds {
		if r.was != r.status {
			delta[r.was]--
			delta[r.status]++
		}
	}
	var statuses []string
	var ns []int64
	for _, st := range slices.Sorted(maps.Keys(delta)) {
		if delta[st] != 0 {
			statuses, ns = append(statuses, st), append(ns, delta[st])
		}
	}
	if len(statuses) == 0 {
		return
	}
	b.Queue(`INSERT INTO order_status_counts (status, n) SELECT * FROM unnest($1::text[], $2::bigint[]) AS c(status, n)
		ORDER BY status ON CONFLICT (status) DO UPDATE SET n = order_status_counts.n + excluded.n`, statuses, ns)
}

// queueQueues writes the moved stores' queues in one statement: counts,
// sequence, frontier and the out-of-turn departures, sorted.
func queueQueues(b *pgx.Batch, moved map[uuid.UUID]bool, queues map[uuid.UUID]*queue) {
	if len(moved) == 0 {
		return
	}
	var stores []uuid.UUID
	var pending, next, frontier []int64
	var departed [][]int64
	for id := range moved {
		q := queues[id]
		stores = append(stores, id)
		pending, next, frontier = append(pending, q.pending), append(next, q.next), append(frontier, q.frontier)
		departed = append(departed, slices.Sorted(maps.Keys(q.departed)))
	}
	// A two-dimensional array must be rectangular, so each store's
	// departures travel as text and are cast back.
	b.Queue(`UPDATE store_queues q SET pending = c.pending, next_seq = c.next, frontier = c.frontier,
			departed = c.departed::bigint[]
		FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[]) AS c(id, pending, next, frontier, departed)
		WHERE q.store_id = c.id`, stores, pending, next, frontier, arrayLiterals(departed))
}

// arrayLiterals writes each list as a Postgres array literal ('{1,2,3}').
func arrayLiterals(lists [][]int64) []string {
	out := make([]string, len(lists))
	for i, l := range lists {
		var sb strings.Builder
		sb.WriteByte('{')
		for j, v := range l {
			if j > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.FormatInt(v, 10))
		}
		sb.WriteByte('}')
		out[i] = sb.String()
	}
	return out
}

// Projected is what the projector announces of an order it changed: its
// version, the place it took when it last entered its store's queue, and
// its creation time when it is new. A request that created the order
// answers from it without reading the row back.
type Projected struct {
	Version int        `json:"v"`
	Entry   *int64     `json:"p,omitempty"` // the place it took when it last entered the queue
	Created *time.Time `json:"c,omitempty"` // its created_at, when this batch created it
}

// ParseProjected reads an announcement's value.
func ParseProjected(v string) (Projected, bool) {
	var p Projected
	if err := codec.Unmarshal([]byte(v), &p); err != nil || p.Version <= 0 {
		return Projected{}, false
	}
	return p, true
}

// announcer queues the announcements of the orders rs that a batch of
// items changed.
type announcer func(b *pgx.Batch, rs []*row, items []item)

// announce queues the announcement of the orders rs (sent on commit).
func announce(b *pgx.Batch, rs []*row, _ []item) {
	if len(rs) == 0 {
		return
	}
	b.Queue(`SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, NotifyProjected, announcements(rs))
}

// holder is the announcer of a rebuild of the read model (topic's): each
// announcement is kept with the position of its order's last record in
// the batch, and sent at the swap if the live projector had not reached
// that record (package held).
func holder(topic string) announcer {
	return func(b *pgx.Batch, rs []*row, items []item) {
		if len(rs) == 0 {
			return
		}
		last := make(map[uuid.UUID]*item, len(rs))
		for i := range items {
			it := &items[i]
			if l := last[it.data.Order.ID]; l == nil || it.offset > l.offset {
				last[it.data.Order.ID] = it
			}
		}
		partitions, offsets := make([]int32, len(rs)), make([]int64, len(rs))
		for i, r := range rs {
			partitions[i], offsets[i] = last[r.id].partition, last[r.id].offset
		}
		held.Queue(b, ConsumerName, topic, NotifyProjected, announcements(rs), partitions, offsets)
	}
}

// announcements are the payloads announcing the orders rs: each order's
// id, a space and what is announced of it (Projected).
func announcements(rs []*row) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		p := Projected{Version: r.version, Entry: r.entry}
		if r.created != nil {
			at := r.created.data.Order.CreatedAt
			p.Created = &at
		}
		v, _ := codec.Marshal(p)
		out[i] = r.id.String() + " " + string(v)
	}
	return out
}

func trackingText(r *row) (*string, error) {
	if !r.trackingSet || r.tracking == nil {
		return nil, nil
	}
	raw, err := codec.Marshal(r.tracking)
	if err != nil {
		return nil, err
	}
	s := string(raw)
	return &s, nil
}

func jsonText(raw json.RawMessage) *string {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	s := string(raw)
	return &s
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
