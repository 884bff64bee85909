//! Records a run's detached calls: one dispatch group per model pass,
//! recorded with all its calls before any is launched.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_domain::{AccountId, JobToken, ResultId};
use toolserver_store::async_results::{self, AsyncOutcome, NewAsyncResult, PassOwner};
use url::Url;
use uuid::Uuid;

use super::LifecycleSettings;
use crate::turn::{DetachedCall, Detacher};

/// The launch number of a call's first launch.
pub(super) const FIRST_LAUNCH: i32 = 1;

/// The [`Detacher`] of one job's run.
pub(super) struct GroupDetacher {
    pub(super) pool: PgPool,
    pub(super) account: AccountId,
    pub(super) turn_id: Uuid,
    pub(super) job_id: Uuid,
    pub(super) public_url: Url,
    pub(super) ttl: Duration,
    pub(super) settings: LifecycleSettings,
}

/// A new random job token and its SHA-256.
pub(super) fn job_token() -> (JobToken, [u8; 32]) {
    let mut secret = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut secret);
    let token = JobToken::from_random(secret);
    let hash = token.sha256();
    (token, hash)
}

/// The `async` metadata a runner gets with launch `launch` (1 for the
/// first) of the detached call `id`: where to post its outcome and
/// heartbeats, with which token, how often to ping, how long to keep trying
/// to deliver its outcome, and the call's idempotency key (the same on
/// every launch of the call).
pub(super) fn async_meta(
    public_url: &Url,
    settings: &LifecycleSettings,
    id: ResultId,
    launch: i32,
    token: &JobToken,
) -> Result<Value, String> {
    let route = |action: &str| {
        let path = format!("/sandbox-jobs/{id}/{action}");
        public_url
            .join(path.trim_start_matches('/'))
            .map(|url| (path.clone(), url))
            .map_err(|err| format!("the public URL cannot take {path}: {err}"))
    };
    let (complete_path, complete_url) = route("complete")?;
    let (_, heartbeat_url) = route("heartbeat")?;
    Ok(json!({
        "resultId": id.to_string(),
        "idempotencyKey": id.to_string(),
        "completePath": complete_path,
        "completeUrl": complete_url.as_str(),
        "completionToken": token.expose(),
        "heartbeatUrl": heartbeat_url.as_str(),
        "livenessIntervalMs": settings.liveness_interval.as_millis() as u64,
        "completionRetryMs": settings.completion_retry.as_millis() as u64,
        "launch": launch,
    }))
}

#[async_trait]
impl Detacher for GroupDetacher {
    async fn register_pass(
        &self,
        calls: &[DetachedCall<'_>],
    ) -> Result<Vec<(String, Value)>, String> {
        let mut tokens = Vec::with_capacity(calls.len());
        let rows: Vec<NewAsyncResult> = calls
            .iter()
            .map(|call| {
                let (token, token_sha256) = job_token();
                let row = NewAsyncResult {
                    tool_call_id: call.tool_call_id.to_owned(),
                    tool_id: call.tool.tool_id,
                    tool_name: call.tool.name.clone(),
                    token_sha256,
                    ttl: call.tool.detached.timeout.unwrap_or(self.ttl),
                    heartbeat_timeout: call.tool.detached.heartbeat_timeout,
                    liveness_timeout: self.settings.liveness_timeout,
                    input: call.input.clone(),
                    safe_to_repeat: call.tool.effects.allows_repeat(),
                };
                tokens.push(token);
                row
            })
            .collect();
        let owner = PassOwner {
            turn_id: self.turn_id,
            job_id: self.job_id,
        };
        let ids = async_results::register_pass(&self.pool, &self.account, owner, &rows)
            .await
            .map_err(|err| format!("could not record the detached calls: {err}"))?;
        ids.into_iter()
            .zip(tokens)
            .map(|(id, token)| {
                let meta = async_meta(&self.public_url, &self.settings, id, FIRST_LAUNCH, &token)?;
                Ok((id.to_string(), meta))
            })
            .collect()
    }

    async fn ended_at_launch(&self, status_id: &str, outcome: Result<Value, String>) {
        let Ok(id) = ResultId::parse(status_id) else {
            return;
        };
        let outcome = match outcome {
            Ok(value) => AsyncOutcome::Completed(value),
            Err(error) => AsyncOutcome::Failed(error),
        };
        if let Err(err) = async_results::settle(&self.pool, id, &outcome).await {
            tracing::warn!(error = %err, result.id = %id, "could not settle a call that ended at its launch");
        }
    }
}
