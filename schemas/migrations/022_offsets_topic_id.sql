SET LOCAL lock_timeout = '10s';

-- The id of the topic whose offset a row stores, as the fetches that the
-- offset was claimed for gave it. A topic deleted and made again under
-- the same name has a new id: its stored offsets belong to the old log,
-- and the stage runner moves them to the new log's start. Without the
-- id, only a new log still shorter than the stored offset showed that;
-- one grown past it had its first records dropped as applied before.
-- NULL until a claim learns the id (rows from before this migration, a
-- broker whose fetches carry no topic ids).
ALTER TABLE consumer_offsets ADD COLUMN topic_id uuid;
