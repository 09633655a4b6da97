-- The order decider produces its events before its batch commits (the one
-- publishing rule of every stage): the outbox goes. Rows still in it were
-- never published; refuse to drop them.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM order_outbox) THEN
        RAISE EXCEPTION 'order_outbox still holds unpublished order events: start the previous release once so its relay publishes them, then upgrade';
    END IF;
END $$;
DROP TABLE order_outbox;

-- The one job queue. A job is due when due_at has passed; a worker leases
-- it by moving due_at ahead, so a claim reads only due rows. Parked jobs
-- wait at 9999-01-01. The table churns (every push puts and deletes one
-- row), so autovacuum visits it by row count, not by a fraction of its size.
CREATE TABLE jobs (
    queue   text NOT NULL,
    id      uuid NOT NULL,
    step    text NOT NULL,
    attempt int  NOT NULL,
    due_at  timestamptz NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (queue, id)
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000);
CREATE INDEX jobs_due ON jobs (queue, due_at);

-- A push is one job of queue 'push', id the order id, kept by the order
-- decider in the transaction that decides the order. The push manager's
-- tables carry over: an order waiting to start, being pushed, or failed.
INSERT INTO jobs (queue, id, step, attempt, due_at, payload)
SELECT 'push', o.order_id,
       CASE s.state->>'status' WHEN 'PENDING' THEN 'start' WHEN 'PROCESSING' THEN 'call'
            ELSE CASE WHEN a.order_id IS NOT NULL THEN 'auto_retry' ELSE 'parked' END END,
       CASE s.state->>'status' WHEN 'PENDING' THEN COALESCE((s.state->>'push_attempts')::int, 0) + 1
            ELSE COALESCE((s.state->>'push_attempts')::int, 0) END,
       CASE WHEN s.state->>'status' IN ('PENDING', 'PROCESSING') THEN now()
            WHEN a.order_id IS NOT NULL THEN a.due_at ELSE '9999-01-01'::timestamptz END,
       jsonb_build_object('store_id', o.store_id, 'idempotency_key', o.idempotency_key, 'order', o.payload)
FROM push_orders o
JOIN order_state s ON s.order_id = o.order_id
LEFT JOIN push_jobs a ON a.order_id = o.order_id AND a.kind = 'auto_retry'
WHERE s.state->>'status' IN ('PENDING', 'PROCESSING', 'FAILED');
DROP TABLE push_jobs;
DROP TABLE push_orders;
