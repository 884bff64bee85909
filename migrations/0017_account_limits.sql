-- Per-account limits and usage.
--
-- `account_limits` holds an operator's overrides of the deployment's default
-- limits (TOOLSERVER_ACCOUNT_*), one JSON object per account naming only the
-- limits it changes. A write notifies `toolserver_account_limits` with the
-- account id, so every server process drops what it cached for that account.
--
-- `account_usage` adds up what an account's runners used per period (a UTC
-- calendar month): CPU time and the bytes the egress proxy carried. Each
-- server process adds its own deltas every few seconds.
--
-- The partial indexes let admission count an account's unfinished detached
-- turns and unsettled MCP tasks without reading anything else.

CREATE TABLE account_limits (
    account_id  TEXT PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    overrides   JSONB NOT NULL CHECK (jsonb_typeof(overrides) = 'object'),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE account_usage (
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    period_start  DATE NOT NULL,
    runner_cpu_ms BIGINT NOT NULL DEFAULT 0 CHECK (runner_cpu_ms >= 0),
    egress_bytes  BIGINT NOT NULL DEFAULT 0 CHECK (egress_bytes >= 0),
    PRIMARY KEY (account_id, period_start)
);

CREATE INDEX async_turns_unfinished_idx ON async_turns (account_id)
    WHERE status IN ('running', 'waiting');

CREATE INDEX async_tool_results_open_tasks_idx ON async_tool_results (account_id)
    WHERE group_id IS NULL AND status = 'pending';
