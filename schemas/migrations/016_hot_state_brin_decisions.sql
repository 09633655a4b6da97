SET LOCAL lock_timeout = '10s';

-- Two write costs on the path of every order (pg_stat_user_tables and
-- pg_stat_wal of a 1,000 orders/s run):
--
-- order_state holds one row per order, written by each of the order's
-- decisions: created, then updated for the push's start and its outcome.
-- Only 23% of those updates were HOT: the new version found no room on its
-- page, so it went to another and the primary key took a new entry for it.
-- Half-filled pages leave room for an order's later versions next to it.
ALTER TABLE order_state SET (fillfactor = 50);

-- The decisions' decided_at indexes serve only the retention sweep. Rows
-- arrive in decided_at order, which a block range index summarises for a
-- fraction of a b-tree's upkeep on each of an order's three decisions.
DROP INDEX order_decisions_decided_at;
CREATE INDEX order_decisions_decided_at ON order_decisions USING brin (decided_at);
DROP INDEX webhook_decisions_decided_at;
CREATE INDEX webhook_decisions_decided_at ON webhook_decisions USING brin (decided_at);
