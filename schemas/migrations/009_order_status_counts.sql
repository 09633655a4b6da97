-- How many orders the read model holds in each status, kept by the order
-- projector in the transaction that changes a status: the pod_orders gauge
-- reads a few rows instead of counting every order every few seconds.
CREATE TABLE order_status_counts (
    status text PRIMARY KEY,
    n      bigint NOT NULL
);
INSERT INTO order_status_counts (status, n) SELECT status, count(*) FROM orders GROUP BY status;
