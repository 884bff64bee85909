-- Idempotency keys of direct calls (`POST /accounts/me/tools/{toolId}/invoke`
-- with an `Idempotency-Key` header), one row per account and key.
--
-- The request that runs the call claims the key first, naming its server
-- process (see 0016) and the request's fingerprint (its tool and a SHA-256
-- of its canonical body); once the call ends the row holds its result, and
-- a repeat of the same request is answered from it without running
-- anything. A request refused before its call reached a runner deletes its
-- claim. A call whose client went away before it ended is `interrupted`;
-- a `running` row whose process died is judged the same way on reading:
-- nobody knows whether the tool ran, so the key answers 409 until it
-- expires and the tool is never run twice for it. A row is kept until
-- `expires_at` (TOOLSERVER_INVOKE_IDEMPOTENCY_TTL_SECS after its claim):
-- past it the key is free again, and the reaper deletes the row.

CREATE TABLE invoke_idempotency_keys (
    account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    -- The claim that holds the key; every later write names it.
    claim_id    UUID NOT NULL,
    tool_id     UUID NOT NULL,
    fingerprint BYTEA NOT NULL CHECK (length(fingerprint) = 32),
    process_id  UUID NOT NULL,
    state       TEXT NOT NULL DEFAULT 'running'
                CHECK (state IN ('running', 'done', 'interrupted')),
    -- The call's result (`InvokeResult`), once `done`.
    result      JSONB CHECK ((state = 'done') = (result IS NOT NULL)),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (account_id, key)
);

-- The reaper finds expired keys through this.
CREATE INDEX invoke_idempotency_keys_expires_idx ON invoke_idempotency_keys (expires_at);
