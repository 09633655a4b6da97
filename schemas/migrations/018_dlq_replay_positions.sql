SET LOCAL lock_timeout = '10s';

-- How far `podctl dlq replay` has come in each dead-letter topic (named with
-- its prefix, as on the broker): the first dead letter not replayed yet. It was the committed offset of a
-- Kafka consumer group with no members, which the broker forgets once
-- offsets.retention.minutes (7 days by default) have passed: a replay after
-- that began again at offset 0 and re-drove every dead letter a second time,
-- long after their commands' decisions were pruned.
CREATE TABLE dlq_replay_positions (
    dlq_topic   text        PRIMARY KEY,
    next_offset bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
