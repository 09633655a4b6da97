SET LOCAL lock_timeout = '10s';

-- The seed of the command ids a POST under an Idempotency-Key sends, one
-- row per (account, key) for the key's 24-hour window. It was kept in
-- Redis beside the key's stored response; Redis restarted empty or
-- evicting keys then gave a repeat a new seed, so a create without a
-- reference_id made a second order. Here the repeat finds the seed, sends
-- the same command, and is answered with the first decision. The stored
-- response stays in Redis: losing it only makes the repeat run again.
CREATE TABLE idempotency_seeds (
    account_id uuid        NOT NULL,
    key        text        NOT NULL,
    digest     text        NOT NULL, -- of the request's method, path and body
    seed       uuid        NOT NULL,
    sent       boolean     NOT NULL DEFAULT false, -- a 503 said the command is on the log, undecided
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, key)
);
-- The hourly sweep of seeds past their window.
CREATE INDEX idempotency_seeds_created ON idempotency_seeds (created_at);
