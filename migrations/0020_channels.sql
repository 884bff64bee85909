-- Events that arrived through an agent's chat channels (Slack, Telegram, a
-- signed webhook). Each is recorded once (`event_key` is the platform's own
-- event id, so a retried delivery finds its row) and acknowledged at once;
-- its turn is started from the row, by the request that recorded it or, if
-- that could not (the conversation was busy, the process died), by a later
-- pass. `reply_to` says where answers go (the thread or chat).
CREATE TABLE channel_events (
    id              UUID PRIMARY KEY,
    account_id      TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    agent_id        UUID NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    channel         TEXT NOT NULL,
    event_key       TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    message         JSONB NOT NULL,
    reply_to        JSONB NOT NULL,
    turn_id         UUID,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_until   TIMESTAMPTZ,
    failed_at       TIMESTAMPTZ,
    last_error      TEXT,
    received_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (agent_id, channel, event_key)
);

CREATE INDEX channel_events_unstarted ON channel_events (next_attempt_at)
    WHERE turn_id IS NULL AND failed_at IS NULL;

-- A detached turn started by a channel event answers into its channel.
ALTER TABLE async_turns
    ADD COLUMN channel_event UUID REFERENCES channel_events (id) ON DELETE SET NULL;
