-- The tool-call ledger: one row per attempt of every tool call, on every
-- path (a turn's inline calls, detached calls, direct invokes, MCP calls).
--
-- An inline attempt's row is written before its tool runs (status
-- `running`) and ended once with a terminal status; an attempt whose
-- server process died first is ended `server_lost` by a sweep. A detached
-- call's rows are kept by the triggers below, in the transactions that
-- record, relaunch and settle the call, so no path that settles one can
-- miss its row.
--
-- Payloads are kept as the head of their JSON text (at most
-- `payload_limit` bytes, the server's setting when the row was written),
-- with the SHA-256 and byte length of the whole text: a payload is never
-- dropped for its size. Payloads are pruned apart from the rows
-- (`payloads_pruned_at`).

CREATE TABLE tool_calls (
    id               UUID PRIMARY KEY,
    account_id       TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    -- The end user: the subject of the token that made the call.
    subject          TEXT,
    path             TEXT NOT NULL CHECK (path IN ('turn', 'detached', 'invoke', 'mcp')),
    agent_id         UUID,
    conversation_id  TEXT,
    -- The turn, as its client knows it (a message id, a detached turn's id).
    turn_id          TEXT,
    -- The model pass of the turn (from 1) and the call's place in it (from 0).
    step             INTEGER,
    seq              INTEGER,
    tool_call_id     TEXT,
    tool_name        TEXT NOT NULL,
    tool_id          UUID,
    tool_version     INTEGER,
    bundle_sha256    TEXT,
    attempt          INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    status           TEXT NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'ok', 'tool_error', 'input_error', 'denied',
                                       'throttled', 'timeout', 'cancelled', 'runner_lost',
                                       'limit_exceeded', 'replayed', 'server_lost')),
    payload_limit    INTEGER NOT NULL CHECK (payload_limit >= 0),
    input            TEXT,
    input_sha256     BYTEA,
    input_bytes      BIGINT,
    output           TEXT,
    output_sha256    BYTEA,
    output_bytes     BIGINT,
    error            TEXT,
    idempotency_key  TEXT,
    trace_id         TEXT,
    -- The server process running an inline attempt.
    process_id       UUID,
    -- A detached call's result.
    result_id        UUID,
    queued_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    ended_at         TIMESTAMPTZ,
    payloads_pruned_at TIMESTAMPTZ,
    CHECK ((status = 'running') = (ended_at IS NULL))
);

-- Pages, newest first, of all of an account's calls or those of one tool,
-- status, agent, conversation or end user.
CREATE INDEX tool_calls_account_idx ON tool_calls (account_id, started_at DESC, id DESC);
CREATE INDEX tool_calls_tool_idx ON tool_calls (account_id, tool_name, started_at DESC, id DESC);
-- One tool's failures: without it, a status rare for the tool walks all of
-- the tool's attempts.
CREATE INDEX tool_calls_tool_status_idx
    ON tool_calls (account_id, tool_name, status, started_at DESC, id DESC);
CREATE INDEX tool_calls_status_idx ON tool_calls (account_id, status, started_at DESC, id DESC);
CREATE INDEX tool_calls_agent_idx ON tool_calls (account_id, agent_id, started_at DESC, id DESC)
    WHERE agent_id IS NOT NULL;
CREATE INDEX tool_calls_conversation_idx
    ON tool_calls (account_id, conversation_id, started_at DESC, id DESC)
    WHERE conversation_id IS NOT NULL;
CREATE INDEX tool_calls_subject_idx ON tool_calls (account_id, subject, started_at DESC, id DESC)
    WHERE subject IS NOT NULL;
-- The sweep of attempts whose process died, and a detached call's attempts.
CREATE INDEX tool_calls_running_idx ON tool_calls (process_id) WHERE status = 'running';
CREATE INDEX tool_calls_result_idx ON tool_calls (result_id, attempt) WHERE result_id IS NOT NULL;
-- Retention walks rows by age.
CREATE INDEX tool_calls_ended_idx ON tool_calls (ended_at) WHERE ended_at IS NOT NULL;

-- The kept head of a payload's text: at most `payload_limit` bytes, cut at
-- a character boundary.
CREATE FUNCTION tool_call_head(payload TEXT, payload_limit INTEGER) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    head TEXT;
BEGIN
    IF payload IS NULL OR octet_length(payload) <= payload_limit THEN
        RETURN payload;
    END IF;
    head := left(payload, payload_limit);
    WHILE octet_length(head) > payload_limit LOOP
        head := left(head, length(head) - GREATEST(1, (octet_length(head) - payload_limit) / 4));
    END LOOP;
    RETURN head;
END $$;

-- A detached call's first attempt (or an MCP task's), recorded with the call. The payload
-- limit is the recording connection's `toolserver.ledger_payload_bytes`.
CREATE FUNCTION tool_calls_detached_recorded() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    payload_limit INTEGER := COALESCE(
        NULLIF(current_setting('toolserver.ledger_payload_bytes', true), '')::INTEGER, 65536);
    input_text TEXT := NEW.input::TEXT;
BEGIN
    INSERT INTO tool_calls (id, account_id, path, agent_id, conversation_id, turn_id,
                            tool_call_id, tool_name, tool_id, attempt, payload_limit,
                            input, input_sha256, input_bytes, idempotency_key, result_id,
                            queued_at, started_at)
    SELECT gen_random_uuid(), NEW.account_id,
           -- A call with no dispatch group is an MCP client's task.
           CASE WHEN NEW.group_id IS NULL THEN 'mcp' ELSE 'detached' END,
           t.agent_id, t.conversation_id,
           t.id::TEXT, NEW.tool_call_id, NEW.tool_name, NEW.tool_id, NEW.launches,
           payload_limit, tool_call_head(input_text, payload_limit),
           sha256(convert_to(input_text, 'UTF8')), octet_length(input_text), NEW.id::TEXT,
           NEW.id, NEW.created_at, NEW.created_at
    FROM (SELECT 1) one
    LEFT JOIN dispatch_groups g ON g.id = NEW.group_id
    LEFT JOIN async_turns t ON t.id = g.turn_id;
    RETURN NULL;
END $$;

CREATE TRIGGER tool_calls_detached_recorded AFTER INSERT ON async_tool_results
    FOR EACH ROW EXECUTE FUNCTION tool_calls_detached_recorded();

-- A detached call relaunched (its runner was lost: the attempt before ends
-- `runner_lost`) or settled (its last attempt ends with the call's status).
CREATE FUNCTION tool_calls_detached_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    output_text TEXT := NEW.response::TEXT;
BEGIN
    IF NEW.launches > OLD.launches THEN
        UPDATE tool_calls SET status = 'runner_lost', ended_at = now(),
               error = 'the runner was lost; the call was launched again'
        WHERE result_id = NEW.id AND status = 'running';
        INSERT INTO tool_calls (id, account_id, subject, path, agent_id, conversation_id,
                                turn_id, tool_call_id, tool_name, tool_id, tool_version,
                                bundle_sha256, attempt, payload_limit, input, input_sha256,
                                input_bytes, idempotency_key, result_id, queued_at)
        SELECT gen_random_uuid(), account_id, subject, path, agent_id, conversation_id,
               turn_id, tool_call_id, tool_name, tool_id, tool_version, bundle_sha256,
               NEW.launches, payload_limit, input, input_sha256, input_bytes,
               idempotency_key, result_id, queued_at
        FROM tool_calls WHERE result_id = NEW.id ORDER BY attempt DESC LIMIT 1;
    END IF;
    IF OLD.status = 'pending' AND NEW.status <> 'pending' THEN
        UPDATE tool_calls SET
            status = CASE
                WHEN NEW.status = 'completed' THEN 'ok'
                WHEN NEW.status = 'cancelled' THEN 'cancelled'
                WHEN NEW.status = 'expired' THEN 'timeout'
                -- The reaper fails calls whose runner was lost, and says so
                -- for its transaction.
                WHEN current_setting('toolserver.call_end', true) = 'runner_lost'
                    THEN 'runner_lost'
                ELSE 'tool_error' END,
            ended_at = now(),
            output = tool_call_head(output_text, payload_limit),
            output_sha256 = sha256(convert_to(output_text, 'UTF8')),
            output_bytes = octet_length(output_text),
            error = NEW.error
        WHERE result_id = NEW.id AND status = 'running';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tool_calls_detached_changed
    AFTER UPDATE OF status, launches ON async_tool_results
    FOR EACH ROW EXECUTE FUNCTION tool_calls_detached_changed();

-- Detached calls (and MCP tasks) still pending at the upgrade are put on
-- the record, so that they end on it like those recorded from now on.
INSERT INTO tool_calls (id, account_id, path, agent_id, conversation_id, turn_id,
                        tool_call_id, tool_name, tool_id, attempt, payload_limit,
                        input, input_sha256, input_bytes, idempotency_key, result_id,
                        queued_at, started_at)
SELECT gen_random_uuid(), r.account_id,
       CASE WHEN r.group_id IS NULL THEN 'mcp' ELSE 'detached' END,
       t.agent_id, t.conversation_id, t.id::TEXT, r.tool_call_id, r.tool_name, r.tool_id,
       r.launches, 65536, tool_call_head(r.input::TEXT, 65536),
       sha256(convert_to(r.input::TEXT, 'UTF8')), octet_length(r.input::TEXT), r.id::TEXT,
       r.id, r.created_at, r.created_at
FROM async_tool_results r
LEFT JOIN dispatch_groups g ON g.id = r.group_id
LEFT JOIN async_turns t ON t.id = g.turn_id
WHERE r.status = 'pending';
