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
//   - A batch that fails for a transient reason (Postgres or Kafka down, a
//     lost connection, a timeout, a serialization failure) is retried with
//     backoff, without end: nothing is ever skipped or dead-lettered because
//     a dependency was unavailable.
//   - One record never holds back the others (the dead-letter policy). A
//     failure is permanent (IsPermanent) when the handler marks it with
//     Poison (a record it cannot decode, or that breaks a rule of the data),
//     when the handler panics, or when Postgres refuses the data (SQLSTATE
//     class 21 cardinality violation, 22 data exception, 23 integrity
//     violation, 54 program limit, but not a full NOTIFY queue). A batch that
//     fails permanently PoisonAttempts times, or once when the failure comes
//     of its records' content (Poison, class 21 or 22), is split in halves,
//     each applied the same way (its records and offsets in one transaction,
//     so good records still apply exactly once), down to single records. A
//     record that on its own fails permanently as often is
//     produced to the consumer's dead-letter topic
//     (schemas.Naming.DeadLetterTopic: pod.dlq.<consumer>, or
//     <Consumer.DeadLetterAs>) with its key, value and
//     headers plus pod-dlq-* headers naming the error, the original topic,
//     partition and offset, the consumer and the time (a dead letter the
//     topic will not take whole keeps only those, and pod-dlq-dropped: the
//     size left out); then one transaction
//     stores its offset as consumed, and the loop goes on. The produce comes
//     first (acks=all): a crash between the two dead-letters the record a
//     second time after restart, it never loses it. Handlers do not skip
//     records they cannot decode: they return Poison(err).
//   - Dead letters are counted (pod_consumer_dead_letters_total) and
//     pod_consumer_last_progress_timestamp_seconds moves whenever a batch is
//     applied or dead-lettered or a poll finds nothing to do, so it goes
//     stale only for a consumer stuck retrying or whose fetches fail (a
//     poll that brings only errors is followed by a second's wait, not
//     counted as idle). podctl dlq list|replay shows and re-drives dead
//     letters.
//   - When the stored offset moves backwards (an operator's edit of
//     consumer_offsets), the consumer rejoins and starts again from the
//     stored offsets. When it moves forwards (a read model's rebuild swapped
//     in, projections.Rebuild), the records below it are dropped as applied,
//     unless the log now ends before it, cut back where no epoch stored
//     tells where (see below): then the stored offset goes to the log's
//     start, and the consumer reads the partition again from there.
//   - A stored offset keeps the id of the topic it was stored for, as the
//     fetches carry it, and the leader epoch of the last record applied.
//     Records of a topic deleted and made again (another id) move the
//     stored offset to the new log's start, however far that log has
//     grown; a member whose client still reads the old topic moves nothing
//     and starts a new session. A log cut back below the stored offset,
//     found by asking the leader where the stored epoch ends (franz-go's
//     ErrDataLoss), moves it to the cut: what the log holds from there on
//     is new.
//   - A batch is what one poll returns, up to MaxBatch records, gathered
//     for a moment while the stage is busy: when a poll returns fewer than
//     BriefLingerBatch records and the stage took one record per
//     BriefLinger or more over its last window (a second or more, ended
//     by a poll), the consumer polls on for up to BriefLinger, so a stage
//     fed a few records at a time does not pay a transaction for each few.
//     A consumer with its own Linger polls on for that long, so related
//     records produced moments apart meet in one batch (the delivery log,
//     whose task and result then make one row write).
//
// A handler returns the records its stage emits, and the runner produces
// them (idempotent, acks=all) before the transaction commits. Recovery from
// a handler's panic, the batch metrics, retry with backoff and the
// dead-letter policy are Policies the runner wraps around each batch's
// transaction (Runner.policies), from the inside out in that order; a
// handler implements none of them.
//
// Offsets are also committed to Kafka after the Postgres commit, only so that
// lag is visible to kadm and operators; they are never read back.
package stream
