-- HTTP tools and account secrets.
--
-- A tool is either a bundle of code its runner executes (`kind` 'bundle',
-- the only kind before this migration) or one HTTP request the server
-- makes itself (`kind` 'http', described by `http_spec`, the manifest's
-- `http` object as sent). Only bundle tools have a bundle.

ALTER TABLE tools
    ADD COLUMN kind TEXT NOT NULL DEFAULT 'bundle' CHECK (kind IN ('bundle', 'http')),
    ADD COLUMN http_spec JSONB,
    ALTER COLUMN bundle_sha256 DROP NOT NULL,
    ALTER COLUMN bundle_size DROP NOT NULL,
    ADD CONSTRAINT tools_kind_body CHECK (
        (kind = 'bundle' AND bundle_sha256 IS NOT NULL AND bundle_size IS NOT NULL AND http_spec IS NULL)
        OR (kind = 'http' AND bundle_sha256 IS NULL AND bundle_size IS NULL AND http_spec IS NOT NULL)
    );

-- An account's named secrets, sealed under the server's secrets key and
-- bound to their account and name; the value is never read back through
-- the API, only used by the server when a tool's request names it.
CREATE TABLE account_secrets (
    account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name        TEXT NOT NULL CHECK (name ~ '^[A-Za-z0-9_]{1,64}$'),
    sealed      BYTEA NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, name)
);
