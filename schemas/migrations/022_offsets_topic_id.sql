SET LOCAL lock_timeout = '10s';

-- What a stored offset was stored for, so that a log that is no longer
-- the one it counted is found:
--
-- topic_id is the id of the topic, as the fetches that the offset was
-- claimed for gave it. A topic deleted and made again under the same name
-- has a new id: its stored offsets belong to the old log, and the stage
-- runner moves them to the new log's start. Without the id, only a new
-- log still shorter than the stored offset showed that; one grown past it
-- had its first records dropped as applied before.
--
-- leader_epoch is the leader epoch of the last record applied below the
-- offset leader_epoch_at. A consumer starting at that offset asks the
-- partition's leader where that epoch ends: a log cut back since (an
-- unclean leader election) ends it earlier, and the records from that
-- point on are new, however far the log has grown. An offset moved by
-- anything else (an older release, a hand edit) no longer matches
-- leader_epoch_at, and its epoch is not used.
--
-- Both are NULL until a claim learns them (rows from before this
-- migration, a broker whose fetches carry no topic ids or epochs).
ALTER TABLE consumer_offsets ADD COLUMN topic_id uuid, ADD COLUMN leader_epoch int, ADD COLUMN leader_epoch_at bigint;
