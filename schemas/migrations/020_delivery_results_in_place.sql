SET LOCAL lock_timeout = '10s';

-- A delivery's row is written twice: pending when its task is read, then
-- again with its first attempt's result, usually in a later batch. None of
-- those updates was HOT (pg_stat_user_tables of a 1,000 orders/s run): the
-- result changes the status, which webhook_deliveries_pending's predicate
-- reads, and the new version found no room on its page. So every result
-- added a heap version elsewhere and an entry to each of the three other
-- indexes. That index served only a webhook's disable, which cancelled its
-- pending deliveries in bulk; a pending delivery whose webhook is no longer
-- active for its generation is now shown cancelled when read, as its next
-- attempt will leave it, so nothing needs to find them. Pages filled from
-- now on stay half empty for the results' versions; a like-for-like
-- insert-then-update loop wrote half the WAL this way.
DROP INDEX webhook_deliveries_pending;
ALTER TABLE webhook_deliveries SET (fillfactor = 50);
