SET LOCAL lock_timeout = '10s';

-- Batches were kept for good, each with up to 1 MiB of order bodies
-- (customers' names and addresses among them). A batch whose items are
-- all done is now deleted once it is older than the batch retention
-- (commands/batch.Retention, 30 days); the hourly prune finds them by age.
CREATE INDEX order_batches_created ON order_batches (created_at);
