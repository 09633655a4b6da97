-- Queue places without counting the queue. Each entry into a store's queue
-- takes the store's next sequence number (orders.queue_seq); the store keeps
-- its frontier (every entry up to it has left the queue) and the entries
-- beyond the frontier that left out of turn (queue_departures: a cancel, a
-- push that started before an older one's). A PENDING order's place is then
-- its sequence number, less the frontier, less the out-of-turn departures
-- before it: a read of a few rows, where counting the PENDING orders ahead
-- read a row per order waiting.
ALTER TABLE store_queues ADD COLUMN next_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE store_queues ADD COLUMN frontier bigint NOT NULL DEFAULT 0;
ALTER TABLE orders ADD COLUMN queue_seq bigint;
CREATE TABLE queue_departures (
    store_id uuid   NOT NULL,
    seq      bigint NOT NULL,
    PRIMARY KEY (store_id, seq)
);

-- The orders waiting now are numbered in their queue order.
WITH numbered AS (
    SELECT order_id, store_id, row_number() OVER (PARTITION BY store_id ORDER BY queued_at, order_id) AS seq
    FROM orders WHERE status = 'PENDING'
)
UPDATE orders o SET queue_seq = n.seq FROM numbered n WHERE o.order_id = n.order_id;
UPDATE store_queues q SET next_seq = c.n
FROM (SELECT store_id, max(queue_seq) AS n FROM orders WHERE status = 'PENDING' GROUP BY store_id) c
WHERE q.store_id = c.store_id;
