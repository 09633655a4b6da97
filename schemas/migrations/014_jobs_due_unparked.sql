-- jobs_due serves one statement: the claim of due jobs. Any statement that
-- names a queue could also read it, and the job deletes did: a 1,000
-- orders/s run now and then planned `DELETE FROM jobs WHERE queue = $1 AND
-- id = ANY($2)` as a bitmap scan of jobs_due on the queue alone, which read
-- every entry the queue's leases and deletes had left since the last
-- vacuum (77,000 entries and 11,000 heap pages per delete, 22 s of a 60 s
-- run in that one statement). The statistics of a table that churns make
-- the two plans close in cost, so which one won was chance.
--
-- Partial on "not parked" (parked jobs wait at 9999-01-01 and are never
-- claimed by time), the index can serve only a statement that says so, as
-- the claim does; every delete and put finds its jobs by the primary key.
-- The index also stops holding the parked jobs of failed orders.
SET LOCAL lock_timeout = '10s';
DROP INDEX jobs_due;
CREATE INDEX jobs_due ON jobs (queue, due_at) WHERE due_at < '9999-01-01T00:00:00Z';
