-- Detached turns (`POST /agents/{id}/async`): their status, settled exactly
-- once, deduplicated by their own event id.

CREATE TABLE async_turns (
    id               UUID PRIMARY KEY,
    account_id       TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    agent_id         UUID NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    conversation_id  TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'waiting', 'completed', 'failed')),
    -- The conversation's messages when the turn completed.
    messages         JSONB,
    error            TEXT,
    -- Set by the one settlement that wins (asyncResultEventId).
    settle_event_id  UUID UNIQUE,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);
