-- Server processes and what they hold.
--
-- Every server process keeps a row here alive while it runs (renewed every
-- third of TOOLSERVER_PROCESS_LIVENESS_MS). A conversation lease and a job
-- claim name the process that holds them, so when that process dies the
-- others know within seconds, not when the lease or the claim would lapse:
-- the conversation's interrupted turn is stored and the conversation freed,
-- and the job is claimed again. A process that is only paused loses what it
-- held the same way; its later writes are fenced by the lease holder and the
-- claim token as before.
--
-- Leases and claims taken before this migration name no process; they are
-- judged by their own expiry, as before.

CREATE TABLE server_processes (
    id          UUID PRIMARY KEY,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    alive_until TIMESTAMPTZ NOT NULL
);

ALTER TABLE conversations
    -- The process whose turn holds the lease.
    ADD COLUMN lease_process UUID,
    -- When the current holder took the lease: the holder's turn streams
    -- opened at or after it.
    ADD COLUMN lease_taken_at TIMESTAMPTZ;

-- The process holding a job's claim.
ALTER TABLE continuation_outbox ADD COLUMN claimed_by UUID;

-- The reaper finds the conversations of dead processes through this.
CREATE INDEX conversations_lease_process_idx ON conversations (lease_process)
    WHERE lease_process IS NOT NULL;
