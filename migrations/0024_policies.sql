-- An account's policies: Cedar text deciding which tool calls may run
-- (allow, ask, deny; see docs/policies.md). One row per account that has
-- saved policies; empty text has no policies in force. `version` counts the
-- saves, so each server process re-parses the text only when it changed.

CREATE TABLE account_policies (
    account_id  TEXT PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    policies    TEXT NOT NULL,
    version     BIGINT NOT NULL DEFAULT 1 CHECK (version >= 1),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
