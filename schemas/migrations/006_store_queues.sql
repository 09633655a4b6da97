-- How many orders of each store wait in the push queue (status PENDING), kept
-- by the order projector in the transaction that changes an order's status,
-- so a create's queue_position needs no count over the store's queue.
CREATE TABLE store_queues (
    store_id uuid PRIMARY KEY,
    pending  bigint NOT NULL
);
INSERT INTO store_queues (store_id, pending)
SELECT store_id, count(*) FROM orders WHERE status = 'PENDING' GROUP BY store_id;

-- The order's place in its store's queue when it entered it (1-based).
ALTER TABLE orders ADD COLUMN entry_position bigint;
