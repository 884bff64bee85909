//! Running one job: a detached turn's first pass or a group's continuation,
//! from the stored conversation to one commit. See the module header of
//! [`super`] for the sequence and what a retried job does.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use toolserver_domain::{
    AccountId, AgentId, CallPath, CallStatus, ConversationId, OnDisconnect, TurnStatus,
};
use toolserver_store::async_results::{self, AsyncOutcome, AsyncResultRecord};
use toolserver_store::async_turns::{self, AsyncTurnRecord, Committed, RunCommit, RunEnd};
use toolserver_store::channel_events::{self, ChannelEvent};
use toolserver_store::jobs::{self, Job, JobKind};
use toolserver_store::webhook_deliveries::NewDelivery;
use toolserver_store::StoreError;
use tracing::Instrument;

use super::detacher::{async_meta, job_token, GroupDetacher};
use super::{AccountStatus, ConversationLease, LeaseError, Lifecycle, LifecycleError};
use crate::approvals::AskedScope;
use crate::channels;
use crate::handoff::{self, TurnScope};
use crate::ledger::{CallScope, TurnLedger};
use crate::policy::{CallGate, Narrowing};
use crate::stream::{self, abandoned_turn_chunks, Opens};
use crate::turn::{launch, pending_output, run_turn, Arrival, Launch, Settled, TurnPlan};
use crate::ui::{with_interrupted_turn, ToolPart, ToolState, UiMessage, UiPart};
use crate::{metrics, AgentLoadError, CheckedAgent};

/// How a job ended without an error.
enum Ran {
    /// The run committed; the turn now stands here.
    Committed(TurnStatus),
    /// The conversation is held by another run; try again soon.
    Busy,
    /// Nothing to commit (the reason is logged).
    Dropped(&'static str),
}

/// A run's outcome as a metric label.
fn run_outcome(result: &Result<Ran, LifecycleError>) -> &'static str {
    match result {
        Ok(Ran::Committed(_)) => "committed",
        Ok(Ran::Busy) => "busy",
        Ok(Ran::Dropped(_)) => "dropped",
        Err(LifecycleError::LostClaim) => "lost_claim",
        Err(err) if err.ends_the_turn() => "turn_failed",
        Err(_) => "retried",
    }
}

impl Lifecycle {
    /// Runs a claimed job in the background (holding `permit`, if any, until
    /// it ends).
    pub(super) fn spawn_run(&self, job: Job, permit: Option<OwnedSemaphorePermit>) {
        let span = tracing::info_span!(
            "detached_run",
            job.id = %job.id,
            turn.id = %job.turn_id,
            attempt = job.attempts
        );
        let this = self.clone();
        self.0.tasks.spawn(
            async move {
                this.run_claimed(job).await;
                drop(permit);
            }
            .instrument(span),
        );
    }

    /// Runs `job` while renewing its claim, and records how it ended.
    async fn run_claimed(&self, job: Job) {
        let started = Instant::now();
        let lost = CancellationToken::new();
        let _renewal = self.keep_claimed(&job, lost.clone());
        let result = tokio::select! {
            result = self.run_job(&job) => result,
            () = lost.cancelled() => Err(LifecycleError::LostClaim),
        };
        let duration_ms = started.elapsed().as_millis() as u64;
        metrics::detached_run(run_outcome(&result), started.elapsed());
        let pool = self.pool();
        match result {
            Ok(Ran::Committed(status)) => {
                tracing::info!(turn.id = %job.turn_id, %status, duration_ms, "detached run committed");
                if status.is_terminal() {
                    self.0.listener.turn_settled(job.turn_id).await;
                }
            }
            Ok(Ran::Busy) => {
                if let Err(err) = jobs::postpone(pool, &job, self.settings().busy_backoff).await {
                    tracing::warn!(error = %err, "could not postpone a job; its claim will lapse");
                }
            }
            Ok(Ran::Dropped(reason)) => {
                tracing::info!(turn.id = %job.turn_id, reason, duration_ms, "job dropped");
            }
            Err(LifecycleError::LostClaim) => {
                tracing::warn!(turn.id = %job.turn_id, duration_ms, "job claim lost; another process runs it");
            }
            Err(err) if err.ends_the_turn() => {
                let reason = err.to_string();
                tracing::info!(turn.id = %job.turn_id, %reason, duration_ms, "detached turn failed");
                match async_turns::fail(pool, job.turn_id, &reason).await {
                    Ok(true) => self.0.listener.turn_settled(job.turn_id).await,
                    Ok(false) => {}
                    Err(err) => {
                        tracing::warn!(error = %err, "could not fail the turn; the job will be retried")
                    }
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, turn.id = %job.turn_id, duration_ms, "detached run failed; it will be retried");
                let backoff = self.settings().retry_backoff;
                if let Err(err) = jobs::retry_later(pool, &job, backoff, &err.to_string()).await {
                    tracing::warn!(error = %err, "could not release the job; its claim will lapse");
                }
            }
        }
    }

    /// Renews `job`'s claim every third of its length; cancels `lost` when
    /// another process has taken it.
    fn keep_claimed(&self, job: &Job, lost: CancellationToken) -> AbortOnDropHandle<()> {
        let (pool, job, claim) = (self.pool().clone(), job.clone(), self.settings().claim);
        AbortOnDropHandle::new(tokio::spawn(async move {
            loop {
                tokio::time::sleep(claim / 3).await;
                match jobs::renew(&pool, &job, claim).await {
                    Ok(true) => {}
                    Ok(false) => return lost.cancel(),
                    Err(err) => tracing::warn!(error = %err, "could not renew a job's claim"),
                }
            }
        }))
    }

    async fn run_job(&self, job: &Job) -> Result<Ran, LifecycleError> {
        let pool = self.pool();
        let (account, turn) = match async_turns::get_any(pool, job.turn_id).await {
            Ok(found) => found,
            Err(StoreError::NotFound) => return Ok(Ran::Dropped("the turn was deleted")),
            Err(err) => return Err(err.into()),
        };
        if turn.status.is_terminal() {
            self.finish_job(job).await?;
            return Ok(Ran::Dropped("the turn had already ended"));
        }
        let Some(agent_id) = turn.agent_id.map(AgentId::from_uuid) else {
            return Err(LifecycleError::AgentDeleted);
        };
        let mut checked = self.checked_agent(&account, agent_id).await?;
        if job.kind == JobKind::Relaunch {
            return self.relaunch(job, &account, &checked).await;
        }
        let conversation = ConversationId::from_stored(turn.conversation_id.clone());
        // Without a known end user, calls are judged as the account's own
        // (`User::""`).
        let end_user = async_turns::end_user(pool, turn.id).await?;
        let narrowing = Narrowing {
            user: end_user.as_deref(),
            conversation: Some(conversation.as_str()),
        };
        let stack = self
            .harness()
            .policy_stack(&account, Some(&checked.config), narrowing)
            .await?;
        let gate = CallGate::new(stack, end_user.clone(), CallPath::Turn)
            .in_turn(agent_id.to_string(), Some(conversation.to_string()));
        checked.registry = checked.registry.with_gate(gate);
        let lease =
            match ConversationLease::take_as(self, &account, &conversation, agent_id, job.id).await
            {
                Ok(lease) => lease,
                Err(LeaseError::Busy) => return Ok(Ran::Busy),
                Err(err) => return Err(err.into()),
            };
        if job.attempts > 1 && self.earlier_attempt_launched(job).await? {
            tracing::info!(turn.id = %turn.id, "an earlier attempt recorded detached calls; their groups carry the turn on");
            let end = match self
                .restore_earlier_attempt(job, &account, &turn, &lease)
                .await?
            {
                Some(messages) => messages,
                None => {
                    return self
                        .commit(job, &account, &turn, lease, RunEnd::Skipped, None)
                        .await
                }
            };
            let value = serde_json::to_value(&end)
                .map_err(|err| LifecycleError::Unstorable(err.to_string()))?;
            return self
                .commit(job, &account, &turn, lease, RunEnd::Restored(&value), None)
                .await;
        }
        let mut messages = lease.stored_messages()?;
        let (assistant, arrivals) = match (job.kind, job.group_id) {
            (JobKind::Continue, Some(group_id)) => {
                let siblings = async_results::of_group(pool, group_id).await?;
                let known: HashSet<String> =
                    messages.iter().flat_map(|m| tool_call_ids(m)).collect();
                if siblings.iter().any(|s| known.contains(&arrival_id(s))) {
                    return self
                        .commit(job, &account, &turn, lease, RunEnd::Skipped, None)
                        .await;
                }
                let group_calls: HashSet<&str> =
                    siblings.iter().map(|s| s.tool_call_id.as_str()).collect();
                let new_id = format!("msg_{}", job.id.simple());
                let mut assistant = continued_message(&mut messages, &group_calls, new_id);
                restore_lost_calls(&mut assistant, &siblings, &known);
                (assistant, siblings.into_iter().map(arrival).collect())
            }
            _ => (open_message(&mut messages, job), Vec::new()),
        };
        let parts_before = assistant.parts.len();
        let mut plan = self.plan(job, &account, &checked, arrivals, messages, assistant);
        let provider = match (job.kind, lease.handoff()) {
            (JobKind::Start, Some(_)) => handoff::held_answer(&checked.config),
            _ => self
                .0
                .harness
                .provider(&checked.config)
                .map_err(|err| LifecycleError::ConfigInvalid(err.to_string()))?,
        };
        let scope = TurnScope {
            account: account.clone(),
            agent: agent_id,
            conversation: conversation.clone(),
            public_url: self.0.harness.settings().public_url.clone(),
            user: end_user.clone(),
        };
        plan.authorizer = Some(self.authorizer(
            &account,
            (agent_id.as_uuid(), conversation.as_str()),
            end_user.clone(),
        ));
        plan.ledger = Some(TurnLedger {
            ledger: self.ledger().clone(),
            scope: CallScope {
                agent: Some(agent_id.as_uuid()),
                conversation: Some(conversation.to_string()),
                turn: Some(turn.id.to_string()),
                subject: end_user.clone(),
                ..CallScope::direct(account.clone(), CallPath::Turn)
            },
        });
        let channel_event = self.channel_event(&turn).await?;
        // A chat channel's thread cannot take a decision (and would not hear
        // the resumed turn): there, calls that need one are refused.
        plan.can_ask_approval = channel_event.is_none();
        async_turns::mark_running(pool, turn.id).await?;
        let renewal = AbortOnDropHandle::new(lease.keep_renewed());
        let recording = stream::record(
            self.streams(),
            &account,
            &turn.conversation_id,
            None,
            OnDisconnect::Continue,
            Opens::Now,
        )
        .await?;
        plan.stop = recording.stop.clone();
        let registry = checked
            .registry
            .in_scope(self.harness().sources(), scope)
            .await;
        let outcome = run_turn(provider, registry, plan, recording.chunks.clone()).await;
        drop(renewal);
        let asking = AskedScope {
            account: account.clone(),
            agent: agent_id.as_uuid(),
            conversation: turn.conversation_id.clone(),
            message: outcome.assistant.id.clone(),
            subject: end_user,
        };
        self.record_asked(&asking, &outcome.asked).await?;
        let added = outcome
            .assistant
            .parts
            .get(parts_before..)
            .unwrap_or_default();
        let reply = channel_event
            .as_ref()
            .and_then(|event| channels::reply_for_pass(event, added, outcome.error.as_deref()));
        let mut messages = outcome.history;
        messages.push(Arc::new(outcome.assistant));
        let value = serde_json::to_value(&messages)
            .map_err(|err| LifecycleError::Unstorable(err.to_string()))?;
        let end = match &outcome.error {
            Some(error) => RunEnd::Failed(&value, error),
            None => RunEnd::Finished(&value),
        };
        // The stream finishes once the conversation holds the turn, so a
        // reader that sees its end finds the turn stored.
        let committed = self
            .commit(job, &account, &turn, lease, end, reply.as_ref())
            .await;
        recording.finish().await;
        committed
    }

    /// The conversation with the pass of `job`'s earlier attempt put back:
    /// that attempt recorded detached calls and died before storing its
    /// pass, so its assistant message is rebuilt from its recorded stream
    /// (marked interrupted), with every call of its groups; `None` when the
    /// conversation holds those calls already.
    async fn restore_earlier_attempt(
        &self,
        job: &Job,
        account: &AccountId,
        turn: &AsyncTurnRecord,
        lease: &ConversationLease,
    ) -> Result<Option<Vec<Arc<UiMessage>>>, LifecycleError> {
        let calls = async_results::of_job(self.pool(), job.id).await?;
        let stored = lease.stored_messages()?;
        let known: HashSet<String> = stored.iter().flat_map(|m| tool_call_ids(m)).collect();
        if calls.is_empty() || calls.iter().any(|call| known.contains(&call.tool_call_id)) {
            return Ok(None);
        }
        let chunks = abandoned_turn_chunks(
            self.streams(),
            account,
            &turn.conversation_id,
            lease.taken_at(),
        )
        .await?;
        let stored_values = serde_json::to_value(&stored)
            .map_err(|err| LifecycleError::Unstorable(err.to_string()))?;
        let rebuilt = match stored_values {
            Value::Array(items) => with_interrupted_turn(items, &chunks),
            _ => None,
        };
        let mut messages = match rebuilt {
            Some(values) => serde_json::from_value(Value::Array(values))
                .map_err(|err| LeaseError::Malformed(err.to_string()))?,
            None => stored,
        };
        let mut assistant = open_message(&mut messages, job);
        for part in assistant.parts.iter_mut() {
            let UiPart::Tool(tool) = part else { continue };
            if let Some(call) = calls.iter().find(|c| c.tool_call_id == tool.tool_call_id) {
                // Launched before the attempt died: the model was told it
                // is pending, and its result arrives with its group.
                tool.state = ToolState::OutputAvailable;
                tool.output = Some(pending_output(&call.tool_name, &call.id.to_string()));
                tool.error_text = None;
                tool.preliminary = false;
            }
        }
        let mut known: HashSet<String> = messages.iter().flat_map(|m| tool_call_ids(m)).collect();
        known.extend(tool_call_ids(&assistant));
        restore_lost_calls(&mut assistant, &calls, &known);
        messages.push(Arc::new(assistant));
        Ok(Some(messages))
    }

    /// Removes a job that needs no commit of a run.
    async fn finish_job(&self, job: &Job) -> Result<(), LifecycleError> {
        let mut tx = self.pool().begin().await.map_err(StoreError::from)?;
        jobs::finish(&mut tx, job).await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(())
    }

    /// Launches again a call whose runner died and that is safe to repeat:
    /// same input and idempotency key, a new job token (the old runner's,
    /// should it still be alive, no longer settles anything).
    async fn relaunch(
        &self,
        job: &Job,
        account: &AccountId,
        checked: &CheckedAgent,
    ) -> Result<Ran, LifecycleError> {
        let pool = self.pool();
        let call = match job.call_id {
            Some(id) => match async_results::get(pool, account, id).await {
                Ok(call) => Some(call),
                Err(StoreError::NotFound) => None,
                Err(err) => return Err(err.into()),
            },
            None => None,
        };
        let Some(call) = call.filter(|call| call.status == CallStatus::Pending) else {
            self.finish_job(job).await?;
            return Ok(Ran::Dropped("the call to launch again had settled"));
        };
        let (token, hash) = job_token();
        let Some(launch_number) = async_results::rotate_token(pool, call.id, hash).await? else {
            self.finish_job(job).await?;
            return Ok(Ran::Dropped("the call to launch again had settled"));
        };
        let settings = self.0.harness.settings();
        let meta = async_meta(
            &settings.public_url,
            &settings.lifecycle,
            call.id,
            launch_number,
            &token,
        );
        let launched = match (checked.registry.get(&call.tool_name), meta) {
            (None, _) => Launch::Failed(format!("{} is no longer enabled", call.tool_name)),
            (_, Err(error)) => Launch::Failed(error),
            (Some(tool), Ok(meta)) => {
                let input = call.input.clone().unwrap_or_else(|| json!({}));
                launch(tool, call.tool_call_id.clone(), input, meta).await
            }
        };
        let settled = match launched {
            Launch::Running => None,
            Launch::Ended(value) => Some(AsyncOutcome::Completed(value)),
            Launch::Failed(error) => Some(AsyncOutcome::Failed(error)),
        };
        if let Some(outcome) = settled {
            async_results::settle(pool, call.id, &outcome).await?;
        }
        self.finish_job(job).await?;
        tracing::info!(result.id = %call.id, "detached call launched again after its runner died");
        Ok(Ran::Dropped("the call was launched again"))
    }

    /// The turn's agent, checked again (it may have changed since launch).
    async fn checked_agent(
        &self,
        account: &AccountId,
        agent_id: AgentId,
    ) -> Result<CheckedAgent, LifecycleError> {
        let loaded = self
            .harness()
            .load_agent(self.pool(), account, agent_id)
            .await;
        loaded.map_err(|err| match err {
            AgentLoadError::NotFound => LifecycleError::AgentDeleted,
            AgentLoadError::Store(store) => store.into(),
            invalid => LifecycleError::ConfigInvalid(invalid.to_string()),
        })
    }

    /// Whether an earlier attempt of `job` opened dispatch groups.
    async fn earlier_attempt_launched(&self, job: &Job) -> Result<bool, LifecycleError> {
        let mut conn = self.pool().acquire().await.map_err(StoreError::from)?;
        Ok(async_results::job_opened_groups(&mut conn, job.id).await?)
    }

    fn plan(
        &self,
        job: &Job,
        account: &AccountId,
        checked: &CheckedAgent,
        arrivals: Vec<Arrival>,
        history: Vec<Arc<UiMessage>>,
        assistant: UiMessage,
    ) -> TurnPlan {
        let settings = self.0.harness.settings();
        let detacher = GroupDetacher {
            pool: self.pool().clone(),
            account: account.clone(),
            turn_id: job.turn_id,
            job_id: job.id,
            public_url: settings.public_url.clone(),
            ttl: settings.async_result_ttl,
            settings: settings.lifecycle.clone(),
        };
        TurnPlan {
            detach: Some(Arc::new(detacher)),
            durable_status: Some(AccountStatus::shared(
                self.pool().clone(),
                self.0.executor.clone(),
                account.clone(),
            )),
            arrivals,
            request_key: Some(job.id.to_string()),
            restate_decided: true,
            ..TurnPlan::for_agent(&checked.config, settings, history, assistant)
        }
    }

    /// The channel event `turn` answers, if a channel started it: read
    /// before the pass runs, so that nothing after it can fail for it.
    async fn channel_event(
        &self,
        turn: &AsyncTurnRecord,
    ) -> Result<Option<ChannelEvent>, LifecycleError> {
        let Some(event) = async_turns::channel_event(self.pool(), turn.id).await? else {
            return Ok(None);
        };
        Ok(Some(channel_events::get(self.pool(), event).await?))
    }

    async fn commit(
        &self,
        job: &Job,
        account: &AccountId,
        turn: &AsyncTurnRecord,
        lease: ConversationLease,
        end: RunEnd<'_>,
        reply: Option<&NewDelivery>,
    ) -> Result<Ran, LifecycleError> {
        let commit = RunCommit {
            account,
            conversation_id: &turn.conversation_id,
            job,
            end,
            reply,
        };
        let committed = async_turns::commit_run(self.pool(), commit).await?;
        lease.hand_over();
        match committed {
            Committed::Turn(status) => Ok(Ran::Committed(status)),
            Committed::LostClaim => Err(LifecycleError::LostClaim),
            Committed::LostConversation => Err(LifecycleError::LostConversation),
        }
    }
}

/// The call id of a tool part.
fn tool_part_id(part: &UiPart) -> Option<String> {
    match part {
        UiPart::Tool(tool) => Some(tool.tool_call_id.clone()),
        _ => None,
    }
}

/// The call ids of a message's tool parts.
fn tool_call_ids(message: &UiMessage) -> Vec<String> {
    message.parts.iter().filter_map(tool_part_id).collect()
}

/// The assistant message a job's first pass builds: the stored one it
/// continues (after an approval), or a new one.
fn open_message(messages: &mut Vec<Arc<UiMessage>>, job: &Job) -> UiMessage {
    match messages.pop() {
        Some(message) if message.role == "assistant" => Arc::unwrap_or_clone(message),
        other => {
            messages.extend(other);
            UiMessage::assistant(format!("msg_{}", job.id.simple()))
        }
    }
}

/// The assistant message a group's continuation builds (`group_calls`: the
/// call ids of the group): the last message when it is the one that made
/// the group's calls, so the turn reads on; otherwise (a later turn of the
/// conversation has run since) a new message `new_id` at the end, so the
/// conversation reads in the order things happened and the model sees the
/// later turns before it hears these results. When no stored message made
/// the calls (their pass died before storing them), they belong to the last
/// assistant message, where they are restored.
fn continued_message(
    messages: &mut Vec<Arc<UiMessage>>,
    group_calls: &HashSet<&str>,
    new_id: String,
) -> UiMessage {
    let made_the_calls = |message: &UiMessage| {
        message.role == "assistant"
            && message
                .tool_parts()
                .any(|part| group_calls.contains(part.tool_call_id.as_str()))
    };
    let continues_last = match messages.last() {
        Some(last) if made_the_calls(last) => true,
        Some(last) => last.role == "assistant" && !messages.iter().any(|m| made_the_calls(m)),
        None => false,
    };
    match continues_last.then(|| messages.pop()).flatten() {
        Some(last) => Arc::unwrap_or_clone(last),
        None => UiMessage::assistant(new_id),
    }
}

/// The call id under which the result of `call` is told to the model.
fn arrival_id(call: &AsyncResultRecord) -> String {
    format!("call_{}", call.id)
}

/// Puts back, in a step of their own, the calls of a pass whose process
/// died before it stored them: the model made them, and their results are
/// about to be told, so the conversation must show them (as pending).
fn restore_lost_calls(
    assistant: &mut UiMessage,
    calls: &[AsyncResultRecord],
    known: &HashSet<String>,
) {
    let lost: Vec<&AsyncResultRecord> = calls
        .iter()
        .filter(|call| !known.contains(&call.tool_call_id))
        .collect();
    if lost.is_empty() {
        return;
    }
    assistant.parts.push(UiPart::StepStart);
    for call in lost {
        assistant.parts.push(UiPart::Tool(Box::new(ToolPart {
            tool_name: call.tool_name.clone(),
            dynamic: false,
            tool_call_id: call.tool_call_id.clone(),
            state: ToolState::OutputAvailable,
            input: Some(call.input.clone().unwrap_or_else(|| json!({}))),
            output: Some(pending_output(&call.tool_name, &call.id.to_string())),
            error_text: None,
            approval: None,
            preliminary: false,
            call_provider_metadata: None,
        })));
    }
}

/// What the model is told of a settled call.
fn arrival(call: AsyncResultRecord) -> Arrival {
    let outcome = match (call.status, call.response) {
        (CallStatus::Completed, Some(value)) => Settled::Completed(value),
        (CallStatus::Cancelled, _) => Settled::Cancelled(call.error.unwrap_or_default()),
        (status, _) => Settled::Failed(call.error.unwrap_or_else(|| status.to_string())),
    };
    Arrival {
        status_id: call.id.to_string(),
        tool_name: call.tool_name,
        outcome,
    }
}

#[cfg(test)]
mod tests;
