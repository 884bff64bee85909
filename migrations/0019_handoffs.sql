-- A conversation handed to people by the `handoff` tool: the handoff (its
-- reason, summary, when and by which call) while it lasts; turns are held
-- until it is released.
ALTER TABLE conversations ADD COLUMN handoff JSONB;

-- Webhook posts that must reach their receiver: each is tried until it is
-- answered 2xx or runs out of attempts, and what happened stays recorded.
-- A claim lasts `claimed_until`, so a post whose server died is tried again
-- by another (receivers deduplicate by the id, sent as `Idempotency-Key`).
CREATE TABLE webhook_deliveries (
    id              UUID PRIMARY KEY,
    account_id      TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    conversation_id TEXT NOT NULL,
    kind            TEXT NOT NULL,
    url             TEXT NOT NULL,
    body            JSONB NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_until   TIMESTAMPTZ,
    delivered_at    TIMESTAMPTZ,
    failed_at       TIMESTAMPTZ,
    last_error      TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE delivered_at IS NULL AND failed_at IS NULL;

CREATE INDEX webhook_deliveries_of_conversation
    ON webhook_deliveries (account_id, conversation_id, created_at);
