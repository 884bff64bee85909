-- Work left in flight by a release from before the detached lifecycle (0006)
-- still ends, and ends for the right reason.
--
-- Calls. Runners of that release never report that they are alive, so 0006
-- left such a call's `alive_until` NULL, the silent-runner reaper passed it
-- by, and it waited for its deadline (an hour by default), after which the
-- model was told it had expired. Its runner is now watched from the
-- upgrade on: `legacy_runner_since` is when, and the reaper fails the call
-- once the runner liveness timeout has passed since then without an
-- outcome, telling the model that its runner stopped answering. A late
-- outcome from that runner is answered 409 (settled differently).
ALTER TABLE async_tool_results ADD COLUMN legacy_runner_since TIMESTAMPTZ;

UPDATE async_tool_results SET legacy_runner_since = now()
WHERE status = 'pending' AND alive_until IS NULL;

-- Passes cut off. That release sealed a pass's group when the pass ended and
-- stored the conversation only then, so a group of its still unsealed was
-- made by a pass that never ended, whose calls the stored conversation does
-- not hold (nor, for a turn's first pass, the message that asked for them).
-- Such a group is closed without a continuation, so no run answers a
-- conversation that lacks them: a cut-off continuation runs again from the
-- stored conversation (0006 kept its job), and a turn cut off in its first
-- pass has no job and no open group left, so the reaper fails it and tells
-- its listeners. Their calls still settle, as above.
UPDATE dispatch_groups SET sealed_at = now(), continued_at = now()
WHERE job_id IS NULL AND sealed_at IS NULL AND continued_at IS NULL;
