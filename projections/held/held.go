// Package held keeps what a rebuild of a read model would announce until
// the rebuild is the live read model (projections.Rebuild).
//
// A rebuild writes beside the live read model, and requests read the live
// one, so its projector cannot announce what it applies: a request told
// would read a row the live tables do not have yet. Nor may it leave the
// announcements out: the records it applies while the swap holds the live
// projector are never applied by the live projector, which goes on from
// the rebuild's offsets, so no one would announce them. So the rebuild's
// projector keeps each announcement in a table of the rebuild's schema,
// with the position of the record that made it, and the swap sends those
// the live projector had not reached when it was held, as it commits.
package held

import (
	"github.com/jackc/pgx/v5"
)

// Table is the table, in a rebuild's schema, that keeps its announcements
// (a name no read model's table has).
const Table = "_held_announcements"

// Create is the DDL that makes the table in schema, when missing.
func Create(schema string) string {
	return `CREATE TABLE IF NOT EXISTS ` + pgx.Identifier{schema, Table}.Sanitize() + ` (
		channel text NOT NULL,
		payload text NOT NULL,
		partition int NOT NULL,
		record_offset bigint NOT NULL)`
}

// Queue keeps the announcements payloads on channel, each made by the
// record at partitions[i]/offsets[i] of topic, in the table of the
// connection's rebuild schema (its search_path), leaving out those the
// live projector (consumer) has applied already: it announced them. Some
// it is applying are kept too; the swap leaves out what it reached.
func Queue(b *pgx.Batch, consumer, topic, channel string, payloads []string, partitions []int32, offsets []int64) {
	if len(payloads) == 0 {
		return
	}
	b.Queue(`INSERT INTO `+pgx.Identifier{Table}.Sanitize()+` (channel, payload, partition, record_offset)
		SELECT $1, a.payload, a.partition, a.record_offset
		FROM unnest($2::text[], $3::int[], $4::bigint[]) AS a(payload, partition, record_offset)
		WHERE a.record_offset >= coalesce((SELECT o.next_offset FROM consumer_offsets o
			WHERE o.consumer = $5 AND o.topic = $6 AND o.partition = a.partition), 0)`,
		channel, payloads, partitions, offsets, consumer, topic)
}

// Release queues, in a transaction that holds the live projector at
// offsets (next offset by partition; a partition missing is at 0), the
// announcements schema keeps of records at or past them, in the order of
// the records, then drops the table.
func Release(b *pgx.Batch, schema string, offsets map[int32]int64) {
	partitions, next := make([]int32, 0, len(offsets)), make([]int64, 0, len(offsets))
	for p, o := range offsets {
		partitions, next = append(partitions, p), append(next, o)
	}
	table := pgx.Identifier{schema, Table}.Sanitize()
	b.Queue(`SELECT pg_notify(h.channel, h.payload) FROM `+table+` h
		LEFT JOIN unnest($1::int[], $2::bigint[]) AS l(partition, next_offset) ON l.partition = h.partition
		WHERE h.record_offset >= coalesce(l.next_offset, 0) ORDER BY h.partition, h.record_offset`, partitions, next)
	b.Queue(`DROP TABLE ` + table)
}
