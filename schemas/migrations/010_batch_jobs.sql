-- Batch items are worked as jobs of the one job queue (queue 'batch', one
-- job per run of 16 items) instead of by row locks held in an open
-- transaction. Items of batches in flight carry over as runs of the same
-- shape; their jobs' ids only need to be distinct.
INSERT INTO jobs (queue, id, step, attempt, due_at, payload)
SELECT 'batch', md5(b.batch_id::text || '/items/' || r.lo)::uuid, 'work', 1, now(),
       jsonb_build_object('batch', b.batch_id, 'account', b.account_id, 'from', r.lo, 'to', least(r.lo + 16, b.total))
FROM order_batches b
CROSS JOIN LATERAL (SELECT DISTINCT (i.idx / 16) * 16 AS lo FROM order_batch_items i
                    WHERE i.batch_id = b.batch_id AND NOT i.done) r;
DROP INDEX order_batch_items_pending;
ALTER TABLE order_batch_items DROP COLUMN leased_until;
