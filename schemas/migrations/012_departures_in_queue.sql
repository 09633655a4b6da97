-- A store's out-of-turn departures (see 008) move into its store_queues row
-- as a sorted array. As a table they were inserted and deleted within
-- moments of each other, and every read of a queue place walked the dead
-- index entries they left until vacuum caught up: the largest share of the
-- rows read per order in a closed-loop run. In the row, the projector reads
-- and writes them with the queue it already locks, and the update stays a
-- heap-only one (no indexed column changes).
ALTER TABLE store_queues ADD COLUMN departed bigint[] NOT NULL DEFAULT '{}';
UPDATE store_queues q SET departed = d.seqs
FROM (SELECT store_id, array_agg(seq ORDER BY seq) AS seqs FROM queue_departures GROUP BY store_id) d
WHERE q.store_id = d.store_id;
DROP TABLE queue_departures;
