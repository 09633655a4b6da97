SET LOCAL lock_timeout = '10s';

-- A failed order's push job was parked for good once its automatic
-- retries were spent, so a manual retry could send the same content
-- again. An order that has also had its last manual retry can have no
-- more, but its job stayed, holding the push's content (the customer's
-- name and address) for as long as the database lives. The decider now
-- drops such a job when it decides the failure; this deletes the ones
-- parked before.
DELETE FROM jobs j
USING order_state s
WHERE j.queue = 'push' AND j.step = 'parked' AND s.order_id = j.id
  AND s.state->>'status' = 'FAILED' AND (s.state->>'manual_retries')::int >= 5;
