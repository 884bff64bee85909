-- The detached lifecycle made crash-safe.
--
-- Every run of a detached turn (its first pass, and each group's
-- continuation) is a job in `continuation_outbox`, claimed for a short time
-- and renewed while it runs; a process that dies loses its claim within
-- seconds. A job's run commits its conversation, the turn's status and the
-- job's removal in one transaction, so finished jobs leave no rows behind.
--
-- Tool and model output is stored as `json`, not `jsonb`: `json` keeps any
-- valid JSON text, `\u0000` included, which `jsonb` refuses.

-- Jobs ----------------------------------------------------------------------
DELETE FROM continuation_outbox WHERE done_at IS NOT NULL;

ALTER TABLE continuation_outbox
    ALTER COLUMN group_id DROP NOT NULL,
    ADD COLUMN turn_id UUID REFERENCES async_turns (id) ON DELETE CASCADE,
    ADD COLUMN kind TEXT NOT NULL DEFAULT 'continue'
        CHECK (kind IN ('start', 'continue', 'relaunch')),
    -- The call a `relaunch` job launches again.
    ADD COLUMN call_id UUID REFERENCES async_tool_results (id) ON DELETE CASCADE,
    -- Not claimable before this (a busy conversation backs off here).
    ADD COLUMN available_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- The live claim, if any: who holds it and until when.
    ADD COLUMN claim_token UUID,
    ADD COLUMN claim_expires_at TIMESTAMPTZ,
    ADD COLUMN last_error TEXT,
    DROP COLUMN claimed_at,
    DROP COLUMN done_at;

UPDATE continuation_outbox o SET turn_id = t.id
FROM dispatch_groups g JOIN async_turns t ON t.id::text = g.parent
WHERE g.id = o.group_id;
DELETE FROM continuation_outbox WHERE turn_id IS NULL;
ALTER TABLE continuation_outbox ALTER COLUMN turn_id SET NOT NULL;

-- The claim query walks this index from the oldest available job.
CREATE INDEX continuation_outbox_available_idx ON continuation_outbox (available_at);
CREATE INDEX continuation_outbox_turn_idx ON continuation_outbox (turn_id);

-- Groups --------------------------------------------------------------------
ALTER TABLE dispatch_groups
    ADD COLUMN turn_id UUID REFERENCES async_turns (id) ON DELETE CASCADE,
    -- The job whose run opened the group.
    ADD COLUMN job_id UUID;

UPDATE dispatch_groups g SET turn_id = t.id FROM async_turns t WHERE t.id::text = g.parent;
DELETE FROM dispatch_groups WHERE turn_id IS NULL;
ALTER TABLE dispatch_groups ALTER COLUMN turn_id SET NOT NULL;

CREATE INDEX dispatch_groups_turn_idx ON dispatch_groups (turn_id);
CREATE INDEX dispatch_groups_unsealed_idx ON dispatch_groups (created_at) WHERE sealed_at IS NULL;

-- Calls ---------------------------------------------------------------------
ALTER TABLE async_tool_results
    ALTER COLUMN response TYPE JSON USING response::json,
    -- The deadline no heartbeat extends (`expires_at` is the current one).
    ADD COLUMN hard_expires_at TIMESTAMPTZ,
    -- Each tool heartbeat moves `expires_at` this far ahead (capped).
    ADD COLUMN heartbeat_timeout_secs DOUBLE PRECISION CHECK (heartbeat_timeout_secs > 0),
    ADD COLUMN last_heartbeat_at TIMESTAMPTZ,
    ADD COLUMN progress JSON,
    -- The call's input, to restore the call in the conversation when the
    -- pass that made it died before storing it.
    ADD COLUMN input JSON,
    -- Whether a call whose runner died may be launched again, and how many
    -- times it has been launched.
    ADD COLUMN safe_to_repeat BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN launches INTEGER NOT NULL DEFAULT 1,
    -- The runner must ping before this, or the call fails (its runner died).
    ADD COLUMN alive_until TIMESTAMPTZ;

UPDATE async_tool_results SET hard_expires_at = expires_at;
ALTER TABLE async_tool_results ALTER COLUMN hard_expires_at SET NOT NULL;

CREATE INDEX async_tool_results_pending_alive_idx ON async_tool_results (alive_until)
    WHERE status = 'pending';

-- Turns and conversations ---------------------------------------------------
-- A deleted agent's turns stay readable: they fail with a reason.
ALTER TABLE async_turns
    ALTER COLUMN agent_id DROP NOT NULL,
    DROP CONSTRAINT async_turns_agent_id_fkey,
    ADD CONSTRAINT async_turns_agent_id_fkey
        FOREIGN KEY (agent_id) REFERENCES agents (id) ON DELETE SET NULL;
ALTER TABLE async_turns ALTER COLUMN messages TYPE JSON USING messages::json;
CREATE INDEX async_turns_open_idx ON async_turns (updated_at)
    WHERE status IN ('running', 'waiting');

ALTER TABLE conversations ALTER COLUMN messages DROP DEFAULT;
ALTER TABLE conversations ALTER COLUMN messages TYPE JSON USING messages::json;
ALTER TABLE conversations ALTER COLUMN messages SET DEFAULT '[]'::json;
