//! Detached turns: a turn that no request waits for. Uploaded async tools
//! are launched on their runners and complete through the completion route;
//! the continuation of a group whose calls have all settled is claimed from
//! the outbox by [`spawn_continuations`] (in every server process; several
//! may run against one database) and runs the model again with the results.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, Mutex};
use toolserver_domain::{AccountId, AgentId, ToolId};
use toolserver_harness::provider::ModelProvider;
use toolserver_harness::tools::ToolRegistry;
use toolserver_harness::turn::{run_turn, Arrival, Detacher, DurableStatus, Settled, TurnPlan};
use toolserver_harness::ui::{UiMessage, UiPart};
use toolserver_sandbox::{Executor, ReservationKey};
use toolserver_store::async_results::{self, ClaimedContinuation, NewAsyncResult};
use toolserver_store::{agents, async_turns, StoreError};
use url::Url;
use uuid::Uuid;

use crate::routes::conversations::ConversationLease;
use crate::state::AppState;

/// Records a detached turn's launched calls in one dispatch group per pass.
pub struct GroupDetacher {
    pool: sqlx::PgPool,
    account: AccountId,
    parent: String,
    public_url: Url,
    ttl: Duration,
    group: Mutex<Option<Uuid>>,
}

impl GroupDetacher {
    /// A detacher for the detached turn `parent`.
    pub fn new(state: &AppState, account: AccountId, parent: Uuid) -> Self {
        let settings = state.harness().settings();
        Self {
            pool: state.pool().clone(),
            account,
            parent: parent.to_string(),
            public_url: settings.public_url.clone(),
            ttl: settings.async_result_ttl,
            group: Mutex::new(None),
        }
    }
}

#[async_trait]
impl Detacher for GroupDetacher {
    async fn register(
        &self,
        tool_call_id: &str,
        tool_name: &str,
        tool_id: Option<ToolId>,
    ) -> Result<(String, Value), String> {
        let fail = |err: StoreError| format!("could not record the detached call: {err}");
        let mut group = self.group.lock().await;
        let group_id = match *group {
            Some(id) => id,
            None => {
                let id = async_results::create_group(&self.pool, &self.account, &self.parent)
                    .await
                    .map_err(fail)?;
                *group = Some(id);
                id
            }
        };
        let mut secret = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut secret);
        let token = hex::encode(secret);
        let call = NewAsyncResult {
            group_id,
            tool_call_id: tool_call_id.to_owned(),
            tool_id,
            tool_name: tool_name.to_owned(),
            token_sha256: Sha256::digest(token.as_bytes()).into(),
            ttl: self.ttl,
        };
        let id = async_results::register(&self.pool, &self.account, call)
            .await
            .map_err(fail)?;
        let path = format!("/sandbox-jobs/{id}/complete");
        let url = self
            .public_url
            .join(path.trim_start_matches('/'))
            .map_err(|err| format!("the public URL cannot take the completion path: {err}"))?;
        let meta = json!({
            "resultId": id,
            "completePath": path,
            "completeUrl": url.as_str(),
            "completionToken": token,
        });
        Ok((id.to_string(), meta))
    }

    async fn launch_failed(&self, status_id: &str, error: &str) {
        let Ok(id) = Uuid::try_parse(status_id) else {
            return;
        };
        let outcome = async_results::AsyncOutcome::Failed(error.to_owned());
        if let Err(err) = async_results::settle(&self.pool, id, &outcome).await {
            tracing::warn!(error = %err, "could not settle a call that never launched");
        }
    }

    async fn seal_pass(&self) -> Result<bool, String> {
        let Some(group_id) = self.group.lock().await.take() else {
            return Ok(false);
        };
        async_results::seal(&self.pool, &self.account, group_id)
            .await
            .map_err(|err| format!("could not seal the dispatch group: {err}"))?;
        Ok(true)
    }
}

/// `async_status` over one account's durable detached calls.
pub struct AccountStatus {
    pool: sqlx::PgPool,
    account: AccountId,
    executor: Arc<dyn Executor>,
}

impl AccountStatus {
    /// The status source of `account`.
    pub fn shared(state: &AppState, account: AccountId) -> Arc<dyn DurableStatus> {
        Arc::new(Self {
            pool: state.pool().clone(),
            account,
            executor: state.executor().clone(),
        })
    }

    async fn runner_key(&self, id: Uuid) -> Result<ReservationKey, String> {
        match async_results::tool_of(&self.pool, &self.account, id).await {
            Ok(Some(tool)) => Ok(ReservationKey::new(self.account.clone(), tool)),
            Ok(None) => Err("this call has no runner".into()),
            Err(err) => Err(err.to_string()),
        }
    }
}

#[async_trait]
impl DurableStatus for AccountStatus {
    async fn answer(&self, status_id: &str, action: &str) -> Option<Result<Value, String>> {
        let id = Uuid::try_parse(status_id).ok()?;
        let record = async_results::get(&self.pool, &self.account, id)
            .await
            .ok()?;
        let describe = |record: &async_results::AsyncResultRecord| {
            let mut status =
                json!({"statusId": status_id, "tool": record.tool_name, "status": record.status});
            if let Some(response) = &record.response {
                status["result"] = response.clone();
            }
            if let Some(error) = &record.error {
                status["error"] = json!(error);
            }
            status
        };
        Some(match action {
            "status" => Ok(describe(&record)),
            "logs" => match self.runner_key(id).await {
                Ok(key) => self
                    .executor
                    .logs(&key, status_id)
                    .await
                    .map(|logs| json!({"statusId": status_id, "logs": logs}))
                    .map_err(|err| format!("the logs are not available: {err}")),
                Err(error) => Err(error),
            },
            "stop" => {
                if record.status == "pending" {
                    if let Ok(key) = self.runner_key(id).await {
                        if let Err(err) = self.executor.cancel(&key, status_id).await {
                            tracing::warn!(error = %err, "could not cancel a detached call on its runner");
                        }
                    }
                    if let Err(err) = async_results::cancel(&self.pool, &self.account, id).await {
                        return Some(Err(err.to_string()));
                    }
                }
                match async_results::get(&self.pool, &self.account, id).await {
                    Ok(record) => Ok(describe(&record)),
                    Err(err) => Err(err.to_string()),
                }
            }
            other => Err(format!(
                "unknown action {other:?}: use status, logs or stop"
            )),
        })
    }
}

/// Everything a detached run needs.
pub struct DetachedRun {
    /// The owning account.
    pub account: AccountId,
    /// The `/async` status row.
    pub turn_id: Uuid,
    /// The agent's model.
    pub provider: Arc<dyn ModelProvider>,
    /// The agent's tools.
    pub registry: ToolRegistry,
    /// The plan (its `detach` is filled in here).
    pub plan: TurnPlan,
    /// The conversation, held for this run.
    pub lease: ConversationLease,
}

/// Runs a detached turn to its end, stores the conversation, and settles
/// the status row unless detached calls are still out (then `waiting`).
pub async fn run_detached(state: AppState, run: DetachedRun) {
    let DetachedRun {
        account,
        turn_id,
        provider,
        registry,
        mut plan,
        lease,
    } = run;
    plan.can_ask_approval = false;
    plan.detach = Some(Arc::new(GroupDetacher::new(&state, account, turn_id)));
    let history = plan.history.clone();
    let (chunks, mut receiver) = mpsc::channel(64);
    let drain = tokio::spawn(async move { while receiver.recv().await.is_some() {} });
    let renewal = lease.keep_renewed();
    let outcome = run_turn(provider, registry, plan, chunks).await;
    renewal.abort();
    let _ = drain.await;
    let mut messages = history;
    messages.push(outcome.assistant);
    if let Err(err) = lease.save(&messages).await {
        tracing::error!(error = %err, "could not store the detached turn's conversation");
    }
    // Recorded before the conversation is released, so a continuation
    // (which needs the conversation) always comes after.
    let pool = state.pool();
    let recorded = if outcome.detached_waiting {
        async_turns::mark(pool, turn_id, "waiting")
            .await
            .map(|()| true)
    } else {
        let event_id = Uuid::now_v7();
        match (&outcome.error, serde_json::to_value(&messages)) {
            (Some(error), _) => async_turns::settle(pool, turn_id, event_id, Err(error)).await,
            (None, Ok(value)) => async_turns::settle(pool, turn_id, event_id, Ok(&value)).await,
            (None, Err(err)) => {
                async_turns::settle(pool, turn_id, event_id, Err(&err.to_string())).await
            }
        }
    };
    match recorded {
        Ok(true) if !outcome.detached_waiting => crate::nats::publish_final(&state, turn_id).await,
        Ok(_) => {}
        Err(err) => tracing::error!(error = %err, "could not record the detached turn's status"),
    }
    lease.release().await;
}

/// Claims and runs continuations until the process ends, polling every
/// `idle`; a claim older than `visibility` is presumed lost with its worker
/// and is claimed again.
pub fn spawn_continuations(
    state: AppState,
    idle: Duration,
    visibility: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match async_results::claim_continuation(state.pool(), visibility).await {
                Ok(Some(job)) => {
                    if let Err(err) = continue_turn(&state, &job).await {
                        tracing::warn!(error = %err, job = %job.id, "continuation failed; it will be retried");
                    }
                }
                Ok(None) => tokio::time::sleep(idle).await,
                Err(err) => {
                    tracing::warn!(error = %err, "could not claim a continuation");
                    tokio::time::sleep(idle).await;
                }
            }
        }
    })
}

/// Runs one continuation: the group's results go to the model, which runs
/// again on the stored conversation. Idempotent on the outbox row: results
/// already in the conversation are not injected twice.
async fn continue_turn(state: &AppState, job: &ClaimedContinuation) -> Result<(), String> {
    let pool = state.pool();
    let turn_id = Uuid::try_parse(&job.parent).map_err(|err| err.to_string())?;
    let (account, turn) = async_turns::get_any(pool, turn_id)
        .await
        .map_err(|err| err.to_string())?;
    let agent_id = AgentId::from_uuid(turn.agent_id);
    let finish = |reason: &str| {
        tracing::info!(job = %job.id, reason, "continuation finished without running");
    };
    let record = match agents::get(pool, &account, agent_id).await {
        Ok(record) => record,
        Err(StoreError::NotFound) => {
            let _ =
                async_turns::settle(pool, turn_id, Uuid::now_v7(), Err("the agent was deleted"))
                    .await;
            finish("agent deleted");
            return async_results::finish_continuation(pool, job.id)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string());
        }
        Err(err) => return Err(err.to_string()),
    };
    let harness = state.harness();
    let config = harness
        .unseal(
            &record.config,
            record.sealed_secrets.as_deref(),
            &account,
            agent_id,
        )
        .map_err(|err| err.to_string())?;
    let checked = match harness.check(&account, &config).await {
        Ok(checked) => checked,
        Err(err) => {
            let error = format!("the agent's config is no longer valid: {err}");
            let _ = async_turns::settle(pool, turn_id, Uuid::now_v7(), Err(&error)).await;
            return async_results::finish_continuation(pool, job.id)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string());
        }
    };
    let provider = harness
        .provider(&checked.config)
        .map_err(|err| err.to_string())?;
    let lease =
        match ConversationLease::take(state, &account, &turn.conversation_id, agent_id).await {
            Ok(lease) => lease,
            Err(_) => {
                // The launching run still holds the conversation; try again soon.
                let _ = async_results::release_continuation(pool, job.id).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Ok(());
            }
        };
    let mut messages = lease.stored_messages().map_err(|err| err.to_string())?;
    let siblings = async_results::of_group(pool, job.group_id)
        .await
        .map_err(|err| err.to_string())?;
    let injected = |id: &Uuid| {
        let call_id = format!("call_{id}");
        messages.iter().any(|m| {
            m.parts
                .iter()
                .any(|p| matches!(p, UiPart::Tool(t) if t.tool_call_id == call_id))
        })
    };
    if siblings.iter().any(|s| injected(&s.id)) {
        lease.release().await;
        finish("already continued");
        return async_results::finish_continuation(pool, job.id)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
    }
    let arrivals = siblings
        .into_iter()
        .map(|sibling| Arrival {
            status_id: sibling.id.to_string(),
            tool_name: sibling.tool_name,
            outcome: match (sibling.status.as_str(), sibling.response) {
                ("completed", Some(value)) => Settled::Completed(value),
                ("cancelled", _) => Settled::Cancelled(sibling.error.unwrap_or_default()),
                (status, _) => Settled::Failed(sibling.error.unwrap_or_else(|| status.to_owned())),
            },
        })
        .collect();
    let assistant = match messages.pop() {
        Some(message) if message.role == "assistant" => message,
        other => {
            messages.extend(other);
            UiMessage::assistant(format!("msg_{}", Uuid::now_v7().simple()))
        }
    };
    let settings = harness.settings();
    let plan = TurnPlan {
        system: checked.config.system_prompt.clone(),
        model_id: checked.config.model.model_id.clone(),
        options: checked.config.model.options.clone(),
        max_steps: checked.config.max_steps,
        max_parallel_tool_calls: settings.max_parallel_tool_calls,
        max_duration: settings.max_turn_duration,
        can_ask_approval: false,
        detach: None,
        durable_status: Some(AccountStatus::shared(state, account.clone())),
        arrivals,
        history: messages,
        assistant,
    };
    async_turns::mark(pool, turn_id, "running")
        .await
        .map_err(|e| e.to_string())?;
    let run = DetachedRun {
        account,
        turn_id,
        provider,
        registry: checked.registry,
        plan,
        lease,
    };
    run_detached(state.clone(), run).await;
    async_results::finish_continuation(pool, job.id)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}
