-- Approvals as durable records: one row per tool call a turn stopped on
-- because it needs a person's decision (`needsApproval`, or a policy that
-- asks). A decision comes from any client (`POST /approvals/{id}`), the
-- one-time link (only its SHA-256 is kept), the chat that asked, or the
-- expiry; once every approval of the assistant message is decided, the
-- turn resumes on the server and `resumed_at` is set. See docs/approvals.md.

CREATE TABLE approvals (
    id               TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    agent_id         UUID NOT NULL,
    conversation_id  TEXT NOT NULL,
    message_id       TEXT NOT NULL,
    tool_call_id     TEXT NOT NULL,
    tool             TEXT NOT NULL,
    input            JSONB NOT NULL,
    subject          TEXT,
    approvers        TEXT[] NOT NULL DEFAULT '{}',
    why              TEXT NOT NULL,
    link_sha256      BYTEA NOT NULL UNIQUE,
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    reason           TEXT,
    decided_by       TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at       TIMESTAMPTZ NOT NULL,
    decided_at       TIMESTAMPTZ,
    resumed_at       TIMESTAMPTZ,
    CHECK ((status = 'pending') = (decided_at IS NULL))
);

CREATE INDEX approvals_by_status ON approvals (account_id, status, created_at DESC, id DESC);
CREATE INDEX approvals_by_message ON approvals (account_id, conversation_id, message_id);
CREATE INDEX approvals_due ON approvals (expires_at) WHERE status = 'pending';
CREATE INDEX approvals_unresumed ON approvals (decided_at)
    WHERE status <> 'pending' AND resumed_at IS NULL;

-- Where an account's new approvals are announced (with their one-time link).
ALTER TABLE account_policies ADD COLUMN approval_webhook TEXT;

-- The end user a detached turn acts for (its token's subject; the asking
-- turn's, for a turn resumed after approvals): its calls are judged and
-- recorded as theirs.
ALTER TABLE async_turns ADD COLUMN end_user TEXT;
