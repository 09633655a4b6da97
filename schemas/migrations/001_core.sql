-- Accounts, API tokens and the offsets every consumer stores with its writes.
CREATE TABLE accounts (
    account_id uuid PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Tokens are kept only as SHA-256 digests; the plain token is shown once by podctl.
CREATE TABLE api_tokens (
    token_hash bytea PRIMARY KEY,
    account_id uuid NOT NULL REFERENCES accounts (account_id),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX api_tokens_account ON api_tokens (account_id);

-- next_offset is the first offset not yet applied by the consumer for the partition.
-- Consumers update it in the same transaction as their effects.
CREATE TABLE consumer_offsets (
    consumer    text   NOT NULL,
    topic       text   NOT NULL,
    partition   int    NOT NULL,
    next_offset bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition)
);
