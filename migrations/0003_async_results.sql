-- Detached async tool calls: one row per call, grouped by the model pass that
-- launched them; a continuation is enqueued (outbox) exactly once, by the
-- transaction that settles the last sibling of a sealed group.

CREATE TABLE dispatch_groups (
    id            UUID PRIMARY KEY,
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    -- What the continuation resumes (e.g. the detached turn's status id).
    parent        TEXT NOT NULL,
    -- Siblings registered and not yet settled.
    remaining     INTEGER NOT NULL DEFAULT 0 CHECK (remaining >= 0),
    sealed_at     TIMESTAMPTZ,
    continued_at  TIMESTAMPTZ,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE async_tool_results (
    id            UUID PRIMARY KEY,
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    group_id      UUID NOT NULL REFERENCES dispatch_groups (id) ON DELETE CASCADE,
    tool_call_id  TEXT NOT NULL,
    tool_id       UUID,
    tool_name     TEXT NOT NULL,
    status        TEXT NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'completed', 'failed', 'cancelled', 'expired')),
    response      JSONB,
    error         TEXT,
    -- SHA-256 of the per-result job token; the token itself is never stored.
    token_sha256  BYTEA NOT NULL CHECK (length(token_sha256) = 32),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    settled_at    TIMESTAMPTZ,
    expires_at    TIMESTAMPTZ NOT NULL
);

CREATE INDEX async_tool_results_group_idx ON async_tool_results (group_id);
CREATE INDEX async_tool_results_pending_expiry_idx ON async_tool_results (expires_at)
    WHERE status = 'pending';

CREATE TABLE continuation_outbox (
    id            UUID PRIMARY KEY,
    -- One continuation per group, whoever observes the last settlement.
    group_id      UUID NOT NULL UNIQUE REFERENCES dispatch_groups (id) ON DELETE CASCADE,
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_at    TIMESTAMPTZ,
    attempts      INTEGER NOT NULL DEFAULT 0,
    done_at       TIMESTAMPTZ
);
