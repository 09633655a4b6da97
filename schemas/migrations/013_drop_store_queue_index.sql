-- orders_store_queue served counting a store's PENDING orders ahead of one.
-- Since 008 a queue place is computed from sequence numbers, and no
-- statement reads the index any more; every order entering a queue still
-- wrote an entry to it.
--
-- Dropping it locks orders for a moment. Behind a long transaction the
-- wait would hold every request on orders, so it gives up after 10 s: the
-- start fails and the next start tries again.
SET LOCAL lock_timeout = '10s';
DROP INDEX IF EXISTS orders_store_queue;
