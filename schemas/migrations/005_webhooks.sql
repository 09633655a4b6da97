-- Webhook decider state (commands/webhook): one row per registered webhook,
-- written only by the decider in the transaction that stores its consumed
-- offsets. The management API reads it directly after a decision.
--
-- gen is the activation generation: it grows by one each time a disabled
-- webhook is re-activated. Deliveries carry the generation they were made
-- for; one made for an older generation is cancelled, and the Redis failure
-- streak is counted per generation (so a re-activation starts at 0).
-- Secrets are sealed (internal/secretbox), never stored in plain text.
CREATE TABLE webhooks (
    id                    uuid PRIMARY KEY,
    account_id            uuid NOT NULL,
    url                   text NOT NULL,
    description           text,
    topics                text[] NOT NULL,
    is_active             boolean NOT NULL,
    disabled_reason       text,
    gen                   int NOT NULL,
    secret                text NOT NULL,
    previous_secret       text,
    previous_secret_until timestamptz,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL
);
CREATE INDEX webhooks_account ON webhooks (account_id, created_at DESC, id DESC);

CREATE TABLE webhook_decisions (
    command_id    uuid PRIMARY KEY,
    webhook_id    uuid NOT NULL,
    error_code    text,        -- NULL: accepted
    error_message text,
    decided_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_decisions_decided_at ON webhook_decisions (decided_at);

-- Delivery log (projections/delivery), one row per (event, webhook); id is
-- derived from both. Built from delivery tasks (pending, payload) and
-- attempt results. run counts manual resends (each run has up to 7
-- attempts); run_attempt is the last attempt of the run applied, so a
-- repeated result applies once. payload is json, kept byte for byte.
CREATE TABLE webhook_deliveries (
    id               uuid PRIMARY KEY,
    webhook_id       uuid NOT NULL,
    account_id       uuid NOT NULL,
    event_id         uuid NOT NULL,
    topic            text NOT NULL,
    payload          json,
    status           text NOT NULL,
    attempts         int NOT NULL DEFAULT 0,
    run              int NOT NULL DEFAULT 1,
    run_attempt      int NOT NULL DEFAULT 0,
    gen              int NOT NULL,
    last_status_code int,
    last_error       text,
    next_retry_at    timestamptz,
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at);
