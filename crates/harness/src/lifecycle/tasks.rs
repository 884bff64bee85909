//! MCP tasks on the detached lifecycle: a task is recorded before its call
//! is launched (so a crash leaves a task that fails when its runner stays
//! silent, never a call nobody knows of), the runner completes it through
//! the completion route, and a cancel reaches the runner.

use std::time::Duration;

use serde_json::Value;
use toolserver_domain::{AccountId, CallStatus, ToolId};
use toolserver_sandbox::ReservationKey;
use toolserver_store::async_results::{self, AsyncOutcome};
use toolserver_store::mcp_tasks::{self, NewTask, TaskRecord};
use toolserver_store::StoreError;
use uuid::Uuid;

use super::detacher::{async_meta, job_token, FIRST_LAUNCH};
use super::Lifecycle;
use crate::tools::RegisteredTool;
use crate::turn::{launch, Launch};

/// How long a task lives, and how often its client should poll.
#[derive(Debug, Clone, Copy)]
pub struct TaskTerms {
    /// The task's TTL from creation.
    pub ttl: Duration,
    /// The poll interval it suggests.
    pub poll_interval: Duration,
}

impl Lifecycle {
    /// Records a task calling the uploaded `tool` of `account` with `input`
    /// and launches the call detached; returns the task as stored. A call
    /// that ends at its launch settles the task at once.
    pub async fn start_task(
        &self,
        account: &AccountId,
        tool: &RegisteredTool,
        tool_id: ToolId,
        input: Value,
        terms: TaskTerms,
    ) -> Result<TaskRecord, StoreError> {
        let pool = self.pool();
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
        let id = mcp_tasks::insert(pool, account, &task).await?;
        let public_url = &self.0.harness.settings().public_url;
        let launched = match async_meta(public_url, settings, id, FIRST_LAUNCH, &token) {
            Ok(meta) => launch(tool, id.to_string(), input, meta).await,
            Err(error) => Launch::Failed(error),
        };
        let outcome = match launched {
            Launch::Running => None,
            Launch::Ended(value) => Some(AsyncOutcome::Completed(value)),
            Launch::Failed(error) => Some(AsyncOutcome::Failed(error)),
        };
        if let Some(outcome) = outcome {
            async_results::settle(pool, id, &outcome).await?;
        }
        mcp_tasks::get(pool, account, id).await
    }

    /// Cancels one of `account`'s tasks: the runner is asked to abort the
    /// call, and a task still working settles as cancelled. Answers the
    /// task as it stands after.
    pub async fn cancel_task(
        &self,
        account: &AccountId,
        id: Uuid,
    ) -> Result<TaskRecord, StoreError> {
        let pool = self.pool();
        let task = mcp_tasks::get(pool, account, id).await?;
        if task.status != CallStatus::Pending {
            return Ok(task);
        }
        if let Some(tool) = task.tool_id {
            let key = ReservationKey::new(account.clone(), ToolId::from_uuid(tool));
            if let Err(err) = self.0.executor.cancel(&key, &id.to_string()).await {
                tracing::warn!(error = %err, task.id = %id, "could not cancel a task's call on its runner");
            }
        }
        async_results::cancel(pool, account, id).await?;
        mcp_tasks::get(pool, account, id).await
    }
}
