-- Two index costs the profile of a 1,000 orders/s run showed on the path of
-- every order (pg_stat_statements, shared blocks per row):
--
-- order_push_attempts referenced orders: each attempt the projector wrote
-- checked and key-share locked its order's row, which the same transaction
-- had just written. The projector writes both (and replay empties both
-- together), so the reference only cost; it goes.
ALTER TABLE order_push_attempts DROP CONSTRAINT order_push_attempts_order_id_fkey;

-- webhook_deliveries_created serves only the retention sweep. Rows arrive
-- in about created_at order, which a block range index summarises for a
-- fraction of a b-tree's upkeep on each of a delivery's two row versions.
DROP INDEX webhook_deliveries_created;
CREATE INDEX webhook_deliveries_created ON webhook_deliveries USING brin (created_at);
