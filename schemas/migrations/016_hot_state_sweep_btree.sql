SET LOCAL lock_timeout = '10s';

-- order_state holds one row per order, written by each of the order's
-- decisions: created, then updated for the push's start and its outcome.
-- Only 23% of those updates were HOT (pg_stat_user_tables of a 1,000
-- orders/s run): the new version found no room on its page, so it went to
-- another and the primary key took a new entry for it. Pages filled from
-- now on stay half empty, leaving room for an order's later versions next
-- to it (98% HOT in the same run); pages filled before keep their fill
-- until a table rewrite.
ALTER TABLE order_state SET (fillfactor = 50);

-- webhook_deliveries_created became a block range index in migration 011,
-- for its low upkeep while rows arrive in created_at order. They stop
-- arriving in that order once the retention sweep runs: vacuum frees the
-- swept pages, new rows fill them, and a range's minimum only ever widens,
-- so in time every range matches the sweep and each sweep reads the whole
-- table. A b-tree reads only the rows swept. The build holds off the
-- delivery log's writes (not its reads) until it ends: the log falls
-- behind for that long, and nothing else waits on it.
CREATE INDEX webhook_deliveries_created_at ON webhook_deliveries (created_at);
DROP INDEX webhook_deliveries_created;
