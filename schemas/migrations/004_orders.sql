-- Order decider: state per order, the decision of every command (for the
-- waiting API request and to ignore a command sent twice), and the outbox of
-- events published to pod.order.events after commit.
CREATE TABLE order_state (
    order_id   uuid PRIMARY KEY,
    account_id uuid NOT NULL,
    state      jsonb NOT NULL,
    version    int  NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE order_decisions (
    command_id    uuid PRIMARY KEY,
    order_id      uuid NOT NULL,
    error_code    text,        -- NULL: accepted
    error_message text,
    status        text,        -- the order's status after the decision
    version       int  NOT NULL, -- the order's version after the decision
    decided_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX order_decisions_decided_at ON order_decisions (decided_at);

-- partition is the pod.order.commands partition whose decider wrote the row:
-- rows are published in seq order per partition under that partition's
-- offset row lock, so events of one order keep their order.
CREATE TABLE order_outbox (
    seq       bigserial PRIMARY KEY,
    partition int   NOT NULL,
    event_id  uuid  NOT NULL,
    order_id  uuid  NOT NULL,
    version   int   NOT NULL,
    type      text  NOT NULL,
    value     bytea NOT NULL
);
CREATE INDEX order_outbox_partition ON order_outbox (partition, seq);

-- Order read model, built by projections/order from pod.order.events.
-- Client-supplied objects are json (not jsonb), so they read back in the
-- order their fields were written.
CREATE TABLE orders (
    order_id              uuid PRIMARY KEY,
    account_id            uuid NOT NULL,
    store_id              uuid NOT NULL,
    reference_id          text NOT NULL,
    status                text NOT NULL,
    duplicate             boolean NOT NULL,
    addon_service         text[] NOT NULL DEFAULT '{}',
    pricing               json NOT NULL,
    created_via           text NOT NULL,
    customer              json,
    shipping_address      json,
    label_link            text,
    tracking_number       text,
    shipping_service      text NOT NULL,
    note                  text,
    tags                  text,
    line_items            json NOT NULL,
    tracking              jsonb,
    shipment_status       text,
    idempotency_key       uuid NOT NULL,
    platform_order_id     text,
    platform_order_number text,
    queued_at             timestamptz NOT NULL,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    version               int NOT NULL
);
CREATE INDEX orders_account_created ON orders (account_id, created_at DESC, order_id DESC);
CREATE INDEX orders_account_status_created ON orders (account_id, status, created_at DESC, order_id DESC);
CREATE INDEX orders_store_queue ON orders (store_id, queued_at, order_id) WHERE status = 'PENDING';

CREATE TABLE order_push_attempts (
    order_id    uuid NOT NULL REFERENCES orders (order_id) ON DELETE CASCADE,
    attempt     int  NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    outcome     text,
    error       text,
    PRIMARY KEY (order_id, attempt)
);

-- Push process manager: what to push (from order.created) and the durable
-- work list (start a push, push, retry automatically later).
CREATE TABLE push_orders (
    order_id        uuid PRIMARY KEY,
    account_id      uuid NOT NULL,
    store_id        uuid NOT NULL,
    idempotency_key uuid NOT NULL,
    payload         jsonb NOT NULL,
    version         int NOT NULL  -- the order's last event the manager handled
);

-- kind: start (ask the decider to begin a push; one store's pushes start
-- one at a time, oldest in the queue first), push (call the platform),
-- auto_retry (due after the configured delay).
CREATE TABLE push_jobs (
    order_id     uuid NOT NULL,
    store_id     uuid NOT NULL,
    kind         text NOT NULL,
    attempt      int  NOT NULL,
    due_at       timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, kind, attempt)
);
CREATE INDEX push_jobs_due ON push_jobs (due_at);
CREATE INDEX push_jobs_store ON push_jobs (store_id, kind);

-- Bulk intake: a batch and its items, worked through by the batch worker.
-- Workers hold the row locks of the items (and push workers of their jobs)
-- in an open transaction while working them, so a killed process frees its
-- work at once, without leases to wait out.
CREATE TABLE order_batches (
    batch_id   uuid PRIMARY KEY,
    account_id uuid NOT NULL,
    total      int  NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX order_batches_account ON order_batches (account_id, created_at DESC);

CREATE TABLE order_batch_items (
    batch_id     uuid NOT NULL REFERENCES order_batches (batch_id) ON DELETE CASCADE,
    idx          int  NOT NULL,
    body         bytea NOT NULL,
    done         boolean NOT NULL DEFAULT false,
    http_status  int,
    order_id     uuid,
    result       json,        -- json, not jsonb: kept byte for byte
    leased_until timestamptz,
    finished_at  timestamptz,
    PRIMARY KEY (batch_id, idx)
);
CREATE INDEX order_batch_items_pending ON order_batch_items (batch_id, idx) WHERE NOT done;
