-- MCP tasks: a task-augmented `tools/call` is a detached call of its own,
-- with no turn to continue. Its row has no dispatch group; settling it
-- enqueues nothing. `task_poll_ms` is the poll interval the task suggests.

ALTER TABLE async_tool_results
    ALTER COLUMN group_id DROP NOT NULL,
    ADD COLUMN task_poll_ms INTEGER CHECK (task_poll_ms > 0),
    ADD CONSTRAINT async_tool_results_group_or_task
        CHECK (group_id IS NOT NULL OR task_poll_ms IS NOT NULL);

CREATE INDEX async_tool_results_tasks_idx ON async_tool_results (account_id, id)
    WHERE group_id IS NULL;
