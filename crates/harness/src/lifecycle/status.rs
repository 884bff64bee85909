//! `async_status` over one account's durable detached calls.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use sqlx::PgPool;
use time::format_description::well_known::Rfc3339;
use toolserver_domain::{AccountId, CallStatus, ResultId};
use toolserver_sandbox::{Executor, ReservationKey};
use toolserver_store::async_results::{self, AsyncResultRecord};

use crate::turn::DurableStatus;

/// `async_status` over one account's durable detached calls.
pub struct AccountStatus {
    pool: PgPool,
    account: AccountId,
    executor: Arc<dyn Executor>,
}

impl AccountStatus {
    /// The status source of `account`.
    pub fn shared(
        pool: PgPool,
        executor: Arc<dyn Executor>,
        account: AccountId,
    ) -> Arc<dyn DurableStatus> {
        Arc::new(Self {
            pool,
            account,
            executor,
        })
    }

    async fn runner_key(&self, id: ResultId) -> Result<ReservationKey, String> {
        match async_results::tool_of(&self.pool, &self.account, id).await {
            Ok(Some(tool)) => Ok(ReservationKey::new(self.account.clone(), tool)),
            Ok(None) => Err("this call has no runner".into()),
            Err(err) => Err(err.to_string()),
        }
    }

    async fn stop(
        &self,
        id: ResultId,
        status_id: &str,
        record: &AsyncResultRecord,
    ) -> Result<(), String> {
        if record.status != CallStatus::Pending {
            return Ok(());
        }
        if let Ok(key) = self.runner_key(id).await {
            if let Err(err) = self.executor.cancel(&key, status_id).await {
                tracing::warn!(error = %err, "could not cancel a detached call on its runner");
            }
        }
        async_results::cancel(&self.pool, &self.account, id)
            .await
            .map(|_| ())
            .map_err(|err| err.to_string())
    }
}

/// A call as `async_status` shows it.
fn describe(status_id: &str, record: &AsyncResultRecord) -> Value {
    let mut status =
        json!({"statusId": status_id, "tool": record.tool_name, "status": record.status.as_str()});
    if let Some(response) = &record.response {
        status["result"] = response.clone();
    }
    if let Some(error) = &record.error {
        status["error"] = json!(error);
    }
    if let Some(progress) = &record.progress {
        status["progress"] = progress.clone();
    }
    if let Some(beat) = record
        .last_heartbeat_at
        .and_then(|t| t.format(&Rfc3339).ok())
    {
        status["lastHeartbeatAt"] = json!(beat);
    }
    status
}

#[async_trait]
impl DurableStatus for AccountStatus {
    async fn answer(&self, status_id: &str, action: &str) -> Option<Result<Value, String>> {
        let id = ResultId::parse(status_id).ok()?;
        let record = async_results::get(&self.pool, &self.account, id)
            .await
            .ok()?;
        Some(match action {
            "status" => Ok(describe(status_id, &record)),
            "logs" => match self.runner_key(id).await {
                Ok(key) => self
                    .executor
                    .logs(&key, status_id)
                    .await
                    .map(|logs| json!({"statusId": status_id, "logs": logs}))
                    .map_err(|err| format!("the logs are not available: {err}")),
                Err(error) => Err(error),
            },
            "stop" => match self.stop(id, status_id, &record).await {
                Ok(()) => async_results::get(&self.pool, &self.account, id)
                    .await
                    .map(|record| describe(status_id, &record))
                    .map_err(|err| err.to_string()),
                Err(error) => Err(error),
            },
            other => Err(format!(
                "unknown action {other:?}: use status, logs or stop"
            )),
        })
    }
}
