//! MCP tasks on the detached lifecycle. Sequence of a task-augmented call:
//! 1. the task is recorded before its call is launched (so a crash leaves a
//!    task that fails when its runner stays silent, never a call nobody
//!    knows of);
//! 2. the call is launched detached with an inline window: the runner
//!    streams its progress and, if the call ends within the window, its
//!    outcome in the launch itself; the task is then discarded, since the
//!    caller gets the result and never the task;
//! 3. otherwise the launch ends as `launched` and the same call goes on in
//!    the background as the task: the runner completes it through the
//!    completion route, and a cancel reaches the runner;
//! 4. a task still working at its TTL expires and its call is stopped on
//!    its runner (no client can reach it any more).

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use toolserver_domain::{AccountId, CallStatus, ResultId, ToolId};
use toolserver_sandbox::ReservationKey;
use toolserver_store::async_results;
use toolserver_store::mcp_tasks::{self, NewTask, TaskRecord};
use toolserver_store::StoreError;
use uuid::Uuid;

use super::detacher::{async_meta, job_token, FIRST_LAUNCH};
use super::Lifecycle;
use crate::tools::{Failure, FailureKind, RegisteredTool, ToolEvent, ToolEvents};

/// How long a task lives, how often its client should poll at most, and
/// how long its call may answer in its own request.
#[derive(Debug, Clone, Copy)]
pub struct TaskTerms {
    /// The task's TTL from creation.
    pub ttl: Duration,
    /// The longest poll interval it suggests.
    pub poll_interval: Duration,
    /// A call that ends within this long of its launch answers inline.
    pub inline_window: Duration,
}

/// A task-augmented call as launched: its task and the launch's events.
/// While the call may still answer inline they are its progress
/// (`Snapshot`, `Log`), then either its outcome (`Output`, `Failed`: the
/// caller gets it, see [`Lifecycle::answered_inline`]) or `Launched` (the
/// call goes on as the task, see [`Lifecycle::task_started`]).
pub struct TaskLaunch {
    /// The task's id.
    pub id: ResultId,
    /// The launch's events.
    pub events: ToolEvents,
}

impl Lifecycle {
    /// Records a task calling the uploaded `tool` of `account` with `input`
    /// and launches the call detached, within `terms.inline_window`.
    pub async fn launch_task(
        &self,
        account: &AccountId,
        tool: &RegisteredTool,
        tool_id: ToolId,
        input: Value,
        terms: TaskTerms,
    ) -> Result<TaskLaunch, StoreError> {
        let settings = self.settings();
        let (token, token_sha256) = job_token();
        let task = NewTask {
            tool_id,
            tool_name: tool.name.clone(),
            input: input.clone(),
            token_sha256,
            ttl: terms.ttl,
            liveness_timeout: settings.liveness_timeout,
            poll_interval: terms.poll_interval,
        };
        let id = mcp_tasks::insert(self.pool(), account, &task).await?;
        let public_url = &self.0.harness.settings().public_url;
        let events = match async_meta(public_url, settings, id, FIRST_LAUNCH, &token) {
            Ok(mut meta) => {
                let window = u64::try_from(terms.inline_window.as_millis()).unwrap_or(u64::MAX);
                if window > 0 {
                    meta["inlineMs"] = window.into();
                }
                tool.call_detached(id.to_string(), input, meta)
                    .unwrap_or_else(|| failed(format!("{} cannot run detached", tool.name)))
            }
            Err(error) => failed(error),
        };
        Ok(TaskLaunch { id, events })
    }

    /// The call of task `id` ended within its launch and its caller got
    /// the outcome: the task is forgotten.
    pub async fn answered_inline(
        &self,
        account: &AccountId,
        id: ResultId,
    ) -> Result<(), StoreError> {
        mcp_tasks::discard(self.pool(), account, id).await
    }

    /// The call of task `id` went on in the background: the task as stored.
    pub async fn task_started(
        &self,
        account: &AccountId,
        id: ResultId,
    ) -> Result<TaskRecord, StoreError> {
        mcp_tasks::get(self.pool(), account, id).await
    }

    /// The caller of task `id` went away during the launch: its call is
    /// stopped on its runner and the task forgotten.
    pub async fn abandon_task(
        &self,
        account: &AccountId,
        tool_id: ToolId,
        id: ResultId,
    ) -> Result<(), StoreError> {
        self.stop_call(account, tool_id.as_uuid(), id).await;
        mcp_tasks::discard(self.pool(), account, id).await
    }

    /// Cancels one of `account`'s tasks: the runner is asked to abort the
    /// call, and a task still working settles as cancelled. Answers the
    /// task as it stands after.
    pub async fn cancel_task(
        &self,
        account: &AccountId,
        id: ResultId,
    ) -> Result<TaskRecord, StoreError> {
        let pool = self.pool();
        let task = mcp_tasks::get(pool, account, id).await?;
        if task.status != CallStatus::Pending {
            return Ok(task);
        }
        if let Some(tool) = task.tool_id {
            self.stop_call(account, tool, id).await;
        }
        async_results::cancel(pool, account, id).await?;
        mcp_tasks::get(pool, account, id).await
    }

    /// Expires tasks still working at their TTL and stops their calls on
    /// their runners. Returns how many expired.
    pub(super) async fn expire_tasks(&self, limit: i64) -> Result<u64, StoreError> {
        let expired = mcp_tasks::expire_due(self.pool(), limit).await?;
        for task in &expired {
            let Some(tool) = task.tool_id else { continue };
            match AccountId::parse(&task.account_id) {
                Ok(account) => self.stop_call(&account, tool, task.id).await,
                Err(err) => {
                    tracing::warn!(error = %err, task.id = %task.id, "an expired task's account is not valid");
                }
            }
        }
        Ok(expired.len() as u64)
    }

    /// Asks the runner of `tool` to abort the call `id`.
    async fn stop_call(&self, account: &AccountId, tool: Uuid, id: ResultId) {
        let key = ReservationKey::new(account.clone(), ToolId::from_uuid(tool));
        if let Err(err) = self.0.executor.cancel(&key, &id.to_string()).await {
            tracing::warn!(error = %err, task.id = %id, "could not cancel a task's call on its runner");
        }
    }
}

/// A launch that failed before it reached a runner.
fn failed(error: String) -> ToolEvents {
    futures::stream::once(
        async move { ToolEvent::Failed(Failure::new(FailureKind::RunnerLost, error)) },
    )
    .boxed()
}
