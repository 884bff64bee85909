-- Turn streams: every turn's UI message chunks, recorded in order with an
-- index before anyone is shown them, so any server process can replay a
-- turn and follow it live (resume), and a turn can be stopped from any
-- process.
--
-- A stream is `active` while its turn runs and `finished` once its last
-- chunk is recorded. Its recorder keeps `alive_until` in the future while
-- it runs; an active stream past it (its server died) is finished by the
-- first reader that finds it so, with an error chunk. Chunks are `json`,
-- like tool output elsewhere.

CREATE TABLE turn_streams (
    id              UUID PRIMARY KEY,
    account_id      TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    conversation_id TEXT NOT NULL,
    -- Renewed by the recorder while it runs.
    alive_until     TIMESTAMPTZ NOT NULL,
    status          TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'finished')),
    stop_requested  BOOLEAN NOT NULL DEFAULT false,
    -- Chunks recorded so far (the next chunk's index).
    chunk_count     INTEGER NOT NULL DEFAULT 0 CHECK (chunk_count >= 0),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at     TIMESTAMPTZ,
    FOREIGN KEY (account_id, conversation_id)
        REFERENCES conversations (account_id, id) ON DELETE CASCADE
);

CREATE INDEX turn_streams_conversation_idx
    ON turn_streams (account_id, conversation_id, created_at DESC);
CREATE INDEX turn_streams_finished_idx
    ON turn_streams (finished_at) WHERE status = 'finished';
CREATE INDEX turn_streams_dead_idx
    ON turn_streams (alive_until) WHERE status = 'active';

CREATE TABLE turn_stream_chunks (
    stream_id UUID NOT NULL REFERENCES turn_streams (id) ON DELETE CASCADE,
    idx       INTEGER NOT NULL CHECK (idx >= 0),
    chunk     JSON NOT NULL,
    PRIMARY KEY (stream_id, idx)
);
