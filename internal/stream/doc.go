// Package stream is the one consumer loop every decider, projector and
// delivery stage uses.
//
// Guarantees:
//   - A batch of records is applied in one Postgres transaction that also
//     stores, per partition, the next offset to apply (table consumer_offsets).
//     Effects and progress commit together, so each record's effect happens
//     exactly once even though Kafka delivers at least once.
//   - On every group assignment the consumer seeks to the offsets stored in
//     Postgres (kgo.AdjustFetchOffsetsFn); partitions without a stored offset
//     start at the beginning of the log.
//   - Inside the transaction the stored offset row is locked and records below
//     it are dropped, so a zombie instance that lost its partitions can never
//     apply a record twice.
//   - Records of one partition reach the handler in offset order.
//   - A failing handler is retried with backoff on the same batch; the loop
//     never skips a record it could not apply. Handlers skip records they
//     cannot decode (logging them) rather than fail on them.
//   - When the stored offset moves backwards (podctl replay), the consumer
//     rejoins and starts again from the stored offsets.
//
// Offsets are also committed to Kafka after the Postgres commit, only so that
// lag is visible to kadm and operators; they are never read back.
package stream
