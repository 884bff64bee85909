-- Agents (model + tools configs) and the conversations their turns build.

CREATE TABLE agents (
    id          UUID PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    -- The config with every credential replaced by "[redacted]".
    config      JSONB NOT NULL,
    -- The credentials, sealed with the server's secrets key (nonce || ciphertext).
    secrets     BYTEA,
    version     INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX agents_account_id_idx ON agents (account_id, id);

CREATE TABLE conversations (
    account_id       TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    id               TEXT NOT NULL CHECK (length(id) BETWEEN 1 AND 200),
    agent_id         UUID NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    -- UI messages (AI SDK UIMessage[]) in order.
    messages         JSONB NOT NULL DEFAULT '[]'::jsonb,
    -- The turn that currently owns the conversation, and until when.
    active_turn      UUID,
    lease_expires_at TIMESTAMPTZ,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, id)
);
