-- Catalog read model, built by projections.catalog from pod.catalog.events.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE stores (
    store_id    uuid PRIMARY KEY,
    account_id  uuid NOT NULL,
    name        text NOT NULL,
    shop_domain text NOT NULL,
    status      text NOT NULL CHECK (status IN ('ACTIVE', 'INACTIVE', 'CREDENTIAL_ERROR')),
    platform_id text,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX stores_account_name ON stores (account_id, name, store_id);

CREATE TABLE products (
    product_id  uuid PRIMARY KEY,
    store_id    uuid NOT NULL REFERENCES stores (store_id),
    account_id  uuid NOT NULL,
    title       text NOT NULL,
    status      text NOT NULL CHECK (status IN ('ACTIVE', 'ARCHIVED', 'DRAFT')),
    platform_id text,
    image_url   text,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX products_store_title ON products (store_id, title, product_id);
CREATE INDEX products_store_platform ON products (store_id, platform_id);
CREATE INDEX products_title_trgm ON products USING gin (title gin_trgm_ops);

CREATE TABLE variants (
    variant_id         uuid PRIMARY KEY,
    product_id         uuid NOT NULL REFERENCES products (product_id) ON DELETE CASCADE,
    store_id           uuid NOT NULL,
    account_id         uuid NOT NULL,
    position           int  NOT NULL,
    title              text NOT NULL,
    sku                text NOT NULL,
    price              numeric(12, 2) NOT NULL,
    category           text NOT NULL,
    requires_yarn_type text[] NOT NULL DEFAULT '{}',
    image_url          text
);
CREATE INDEX variants_product ON variants (product_id, position);
CREATE INDEX variants_store ON variants (store_id);
CREATE INDEX variants_sku_trgm ON variants USING gin (sku gin_trgm_ops);

-- Which catalog files were already published for an account (demo data loads once).
CREATE TABLE catalog_loads (
    account_id uuid NOT NULL,
    digest     text NOT NULL,
    loaded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, digest)
);
