-- orders_store_queue served counting a store's PENDING orders ahead of one.
-- Since 008 a queue place is computed from sequence numbers, and no
-- statement reads the index any more; every order entering a queue still
-- wrote an entry to it.
DROP INDEX IF EXISTS orders_store_queue;
