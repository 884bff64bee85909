-- Accounts (tenants) and the tools they upload.

CREATE TABLE accounts (
    id          TEXT PRIMARY KEY,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE tools (
    id              UUID PRIMARY KEY,
    account_id      TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL,
    input_schema    JSONB NOT NULL,
    default_config  JSONB NOT NULL DEFAULT '{}'::jsonb,
    bundle_sha256   TEXT NOT NULL CHECK (bundle_sha256 ~ '^[0-9a-f]{64}$'),
    bundle_size     BIGINT NOT NULL CHECK (bundle_size > 0),
    version         INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT tools_account_name_key UNIQUE (account_id, name)
);

-- Listing pages through one account's tools in id (creation) order.
CREATE INDEX tools_account_id_idx ON tools (account_id, id);
