//! One agent turn: model pass → tool calls → results (preliminary ones for
//! streaming tools) → model again, until the model is done, a call needs
//! approval, or a limit is reached. Every chunk goes to the client and into
//! the assistant message that is stored afterwards.

mod calls;
mod cost;
mod detach;
mod emitter;
mod pass;
mod pending;
mod place;
mod retry;
mod start;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use calls::{launch, pending_output, Launch, APPROVAL_UNAVAILABLE};
pub use detach::{DetachedCall, Detacher, DurableStatus};
pub use emitter::ClientGone;
pub use pending::{Arrival, Settled};
pub use retry::MAY_HAVE_RUN;

use self::calls::{arrival_chunks, handle_calls, run_ready, Authorization, ReadyCall};
use self::cost::TurnCost;
use self::emitter::Emitter;
use self::pass::{run_pass, PassEnd};
use self::pending::PendingWork;
use crate::approvals::{asked_in, AskedApproval};
use crate::connections::Authorizer;
use crate::ledger::{CalledTool, TurnLedger};
use crate::policy::Decision;
use crate::provider::{FinishReason, ModelProvider, ModelRequest};
use crate::tools::ToolRegistry;
use crate::ui::{to_model_history, ToolState, UiChunk, UiMessage, UiPart};
use crate::{metrics, HarnessSettings};
use toolserver_domain::{AgentConfig, AttemptStatus};

/// What a turn runs with.
pub struct TurnPlan {
    /// System prompt.
    pub system: Option<String>,
    /// The provider's model id.
    pub model_id: String,
    /// Generation options.
    pub options: Map<String, Value>,
    /// Most model passes in this turn.
    pub max_steps: u32,
    /// Most tool calls of one pass running at once.
    pub max_parallel_tool_calls: usize,
    /// Longest the turn may run.
    pub max_duration: Duration,
    /// Whether a person can answer approval requests on this path; where
    /// not, calls that need approval are denied with a visible error.
    pub can_ask_approval: bool,
    /// On detached paths: where uploaded async calls are recorded (they
    /// then complete through the completion route, not in this turn).
    pub detach: Option<Arc<dyn Detacher>>,
    /// Answers `async_status` for the account's durable detached calls.
    pub durable_status: Option<Arc<dyn DurableStatus>>,
    /// Results of detached calls to tell the model before its first pass
    /// (a continuation).
    pub arrivals: Vec<Arrival>,
    /// The conversation before the assistant message (shared with the
    /// stored messages, never copied).
    pub history: Vec<Arc<UiMessage>>,
    /// The assistant message to build: new, or continued after approvals
    /// (its decided parts in state `approval-responded`).
    pub assistant: UiMessage,
    /// When set, model pass `n` of this turn is requested with the
    /// idempotency key `<request_key>.<n>`.
    pub request_key: Option<String>,
    /// Cancelled to stop the turn: its model stream and tool calls end, and
    /// the stream ends with `abort`.
    pub stop: CancellationToken,
    /// Where the turn's calls are recorded; unrecorded when `None`.
    pub ledger: Option<TurnLedger>,
    /// Whether each decided call is restated (`tool-input-available`)
    /// before its outcome: a turn resumed on the server is followed by
    /// clients that never saw the message that asked (the AI SDK starts a
    /// resumed stream's message afresh unless it holds an answered call).
    pub restate_decided: bool,
    /// Asks the end user to authorize the connections calls need; `None`:
    /// such calls run and fail without one.
    pub authorizer: Option<Authorizer>,
}

impl TurnPlan {
    /// A plan of `config`'s model and limits on `history`, building
    /// `assistant`; approvals, detaching, status answers and arrivals off.
    pub fn for_agent(
        config: &AgentConfig,
        settings: &HarnessSettings,
        history: Vec<Arc<UiMessage>>,
        assistant: UiMessage,
    ) -> Self {
        Self {
            system: config.system_prompt.clone(),
            model_id: config.model.model_id.clone(),
            options: config.model.options.clone(),
            max_steps: config.max_steps,
            max_parallel_tool_calls: settings.max_parallel_tool_calls,
            max_duration: settings.max_turn_duration,
            can_ask_approval: false,
            restate_decided: false,
            detach: None,
            durable_status: None,
            arrivals: Vec::new(),
            history,
            assistant,
            request_key: None,
            stop: CancellationToken::new(),
            ledger: None,
            authorizer: None,
        }
    }
}

/// How a turn ended.
#[derive(Debug)]
pub struct TurnOutcome {
    /// The conversation before the assistant message, as the plan gave it
    /// (handed back rather than copied).
    pub history: Vec<Arc<UiMessage>>,
    /// The assistant message as the client saw it built.
    pub assistant: UiMessage,
    /// The `finish` reason sent (`None` when the client went away first).
    pub finish_reason: Option<String>,
    /// The error sent, if any.
    pub error: Option<String>,
    /// The calls the turn stopped on for a person's decision.
    pub asked: Vec<AskedApproval>,
}

/// Runs a turn, sending chunks to `out` until the turn ends or `out` closes.
pub async fn run_turn(
    provider: Arc<dyn ModelProvider>,
    registry: ToolRegistry,
    plan: TurnPlan,
    out: mpsc::Sender<UiChunk>,
) -> TurnOutcome {
    let started = metrics::turn_started();
    let mut turn = Turn {
        provider,
        registry,
        emitter: Emitter::new(plan.assistant.clone(), out),
        pending: PendingWork::default(),
        cost: TurnCost::carried(plan.assistant.metadata.as_ref()),
        plan,
        model_passes: 0,
    };
    let limit = turn.plan.max_duration;
    let stop = turn.plan.stop.clone();
    let early = {
        let run = tokio::time::timeout(limit, turn.run());
        tokio::select! {
            ended = run => ended.map_err(|_| EarlyEnd::TimeLimit),
            () = stop.cancelled() => Err(EarlyEnd::Stopped),
        }
    };
    let ended = match early {
        Ok(ended) => ended,
        Err(EarlyEnd::TimeLimit) => {
            let error = format!("the turn exceeded its time limit of {} s", limit.as_secs());
            turn.end_with_error(error).await
        }
        Err(EarlyEnd::Stopped) => turn.end_stopped().await,
    };
    let reason = match &ended {
        Ok((finish_reason, _)) => finish_reason.as_str(),
        Err(ClientGone) => "disconnected",
    };
    metrics::turn_finished(reason, started, turn.model_passes);
    let error = match &ended {
        Ok((_, error)) => error.as_deref(),
        Err(ClientGone) => Some("the client disconnected"),
    };
    tracing::info!(
        reason,
        model_passes = turn.model_passes,
        duration_ms = started.elapsed().as_millis() as u64,
        error,
        "turn finished"
    );
    let mut assistant = turn.emitter.assistant.clone();
    let (finish_reason, error) = match ended {
        Ok((finish_reason, error)) => (Some(finish_reason), error),
        Err(ClientGone) => {
            mark_unfinished(&mut assistant, "cancelled: the client disconnected");
            (None, Some("the client disconnected".into()))
        }
    };
    let asked = asked_in(&turn.registry, &assistant);
    TurnOutcome {
        history: std::mem::take(&mut turn.plan.history),
        assistant,
        finish_reason,
        error,
        asked,
    }
}

/// Why a turn ended before its work did.
enum EarlyEnd {
    TimeLimit,
    Stopped,
}

/// The error a stopped turn reports.
pub const STOPPED: &str = "the turn was stopped";

struct Turn {
    provider: Arc<dyn ModelProvider>,
    registry: ToolRegistry,
    emitter: Emitter,
    pending: PendingWork,
    plan: TurnPlan,
    /// Model passes made so far.
    model_passes: u32,
    /// The model's token counts over the message's passes.
    cost: TurnCost,
}

impl Turn {
    async fn run(&mut self) -> Result<(String, Option<String>), ClientGone> {
        let message_id = self.emitter.assistant.id.clone();
        self.emitter.emit(UiChunk::Start { message_id }).await?;
        let (finish, error) = self.run_steps().await?;
        if let Some(error_text) = &error {
            self.emitter
                .emit(UiChunk::Error {
                    error_text: error_text.clone(),
                })
                .await?;
        }
        self.emitter
            .emit(UiChunk::Finish {
                finish_reason: finish.clone(),
                message_metadata: Some(self.cost.metadata()),
            })
            .await?;
        Ok((finish, error))
    }

    /// Ends the turn early: closes an open step, reports `error`, finishes.
    async fn end_with_error(
        &mut self,
        error: String,
    ) -> Result<(String, Option<String>), ClientGone> {
        self.emitter.close_open_parts().await?;
        mark_unfinished(&mut self.emitter.assistant, &error);
        self.emitter
            .emit(UiChunk::Error {
                error_text: error.clone(),
            })
            .await?;
        self.emitter
            .emit(UiChunk::Finish {
                finish_reason: "error".into(),
                message_metadata: Some(self.cost.metadata()),
            })
            .await?;
        Ok(("error".into(), Some(error)))
    }

    /// Ends a stopped turn: closes an open step, marks unfinished calls,
    /// and ends the stream with `abort`.
    async fn end_stopped(&mut self) -> Result<(String, Option<String>), ClientGone> {
        self.emitter.close_open_parts().await?;
        mark_unfinished(&mut self.emitter.assistant, STOPPED);
        self.emitter.emit(UiChunk::Abort).await?;
        Ok(("abort".into(), Some(STOPPED.into())))
    }

    async fn run_steps(&mut self) -> Result<(String, Option<String>), ClientGone> {
        let awaiting = self.act_on_decisions().await?;
        let arrivals = std::mem::take(&mut self.plan.arrivals);
        self.inject(arrivals).await?;
        if awaiting {
            self.settle_background_work().await?;
            return Ok((FinishReason::ToolCalls.as_ui().to_owned(), None));
        }
        let mut passes = 0u32;
        let mut needs_pass = true;
        let mut last_reason = FinishReason::Stop;
        loop {
            self.pending.collect_finished();
            needs_pass |= self.inject_arrivals().await?;
            if !needs_pass {
                if !self.pending.is_running() {
                    return Ok((last_reason.as_ui().to_owned(), None));
                }
                tokio::select! {
                    () = self.pending.wait_for_one() => {}
                    () = self.emitter.gone() => return Err(ClientGone),
                }
                continue;
            }
            if passes == self.plan.max_steps {
                let running = if self.pending.is_running() {
                    "; background tool calls still running were stopped"
                } else {
                    ""
                };
                let error = format!(
                    "the turn reached its step limit of {} model passes{running}",
                    self.plan.max_steps
                );
                return Ok(("error".into(), Some(error)));
            }
            self.emitter.emit(UiChunk::StartStep).await?;
            self.model_passes += 1;
            let request = metrics::model_request_cpu(|| self.model_request(passes));
            let span =
                tracing::info_span!("model_call", model = %request.model_id, step = passes + 1);
            let end = run_pass(self.provider.as_ref(), request, &mut self.emitter)
                .instrument(span)
                .await?;
            passes += 1;
            let (calls, reason) = match end {
                PassEnd::Finished {
                    calls,
                    reason,
                    usage,
                } => {
                    self.cost.add(usage);
                    tracing::debug!(
                        input_tokens = usage.input_tokens,
                        output_tokens = usage.output_tokens,
                        "model pass finished"
                    );
                    (calls, reason)
                }
                PassEnd::Failed(message) => {
                    self.emitter.emit(UiChunk::FinishStep).await?;
                    return Ok(("error".into(), Some(message)));
                }
            };
            needs_pass = !calls.is_empty();
            last_reason = if calls.is_empty() {
                reason
            } else {
                FinishReason::ToolCalls
            };
            let awaiting = handle_calls(
                &mut self.emitter,
                &self.registry,
                &mut self.pending,
                calls,
                &self.plan,
            )
            .await?;
            self.emitter.emit(UiChunk::FinishStep).await?;
            if awaiting {
                self.settle_background_work().await?;
                return Ok((FinishReason::ToolCalls.as_ui().to_owned(), None));
            }
        }
    }

    /// Runs approved calls and denies the others, before the first pass.
    /// An approved call that needs a connection its end user lacks waits
    /// for it instead (as an undecided call would); returns whether any
    /// does.
    async fn act_on_decisions(&mut self) -> Result<bool, ClientGone> {
        let decided: Vec<_> = self
            .emitter
            .assistant
            .tool_parts()
            .filter(|part| part.state == ToolState::ApprovalResponded)
            .cloned()
            .collect();
        let mut ready = Vec::new();
        let mut awaiting = false;
        for part in decided {
            let approved = part.is_approved();
            let tool_call_id = part.tool_call_id.clone();
            let input = part.input.clone().unwrap_or_else(|| json!({}));
            if self.plan.restate_decided {
                self.emitter
                    .emit(UiChunk::ToolInputAvailable {
                        tool_call_id: tool_call_id.clone(),
                        tool_name: part.tool_name.clone(),
                        input: input.clone(),
                        provider_metadata: part.call_provider_metadata.clone(),
                    })
                    .await?;
            }
            if !approved {
                if let Some(ledger) = &self.plan.ledger {
                    let place = calls::place_of(&self.emitter, Some(ledger), &tool_call_id);
                    let tool = CalledTool {
                        name: &part.tool_name,
                        tool_id: self.registry.get(&part.tool_name).and_then(|t| t.tool_id),
                        version: None,
                    };
                    let status = AttemptStatus::Denied;
                    ledger.refused(&place, tool, &input, status, "a person denied the call");
                }
                self.emitter
                    .emit(UiChunk::ToolOutputDenied { tool_call_id })
                    .await?;
                continue;
            }
            let Some(tool) = self.registry.get(&part.tool_name) else {
                let error_text = format!("the tool {:?} is no longer enabled", part.tool_name);
                self.emitter
                    .emit(UiChunk::ToolOutputError {
                        tool_call_id,
                        error_text,
                    })
                    .await?;
                continue;
            };
            // An approval answers an ask, never a deny: policies changed
            // since the request are applied again.
            let verdict = self.registry.verdict(tool, &input);
            let refusal = match verdict.filter(|v| v.decision == Decision::Deny) {
                Some(verdict) => Some(verdict.explain(&tool.name)),
                None => {
                    match calls::ask_authorization(
                        &mut self.emitter,
                        &self.plan,
                        tool,
                        &tool_call_id,
                    )
                    .await?
                    {
                        Authorization::NotNeeded => None,
                        Authorization::Asked => {
                            if let Some(waiting) =
                                self.emitter.assistant.tool_part_mut(&tool_call_id)
                            {
                                waiting.state = ToolState::InputAvailable;
                            }
                            awaiting = true;
                            continue;
                        }
                        Authorization::Unavailable(error_text) => Some(error_text),
                    }
                }
            };
            if let Some(error_text) = refusal {
                let ledger = self.plan.ledger.as_ref();
                calls::refuse(
                    &mut self.emitter,
                    ledger,
                    &tool_call_id,
                    tool,
                    &input,
                    error_text,
                )
                .await?;
                continue;
            }
            let place = calls::place_of(&self.emitter, self.plan.ledger.as_ref(), &tool_call_id);
            if tool.run_async {
                let events = retry::with_retries(self.plan.ledger.as_ref(), tool, &place, input);
                let output = self.pending.launch(tool, events);
                self.emitter
                    .emit(UiChunk::ToolOutputAvailable {
                        tool_call_id,
                        output,
                        preliminary: None,
                    })
                    .await?;
            } else {
                ready.push(ReadyCall {
                    tool_call_id,
                    tool: tool.clone(),
                    input,
                    place,
                });
            }
        }
        let ledger = self.plan.ledger.as_ref();
        run_ready(
            &mut self.emitter,
            ready,
            self.plan.max_parallel_tool_calls,
            ledger,
        )
        .await?;
        Ok(awaiting)
    }

    /// Tells the model, in a step of its own, about background calls that
    /// finished. Returns whether there were any.
    async fn inject_arrivals(&mut self) -> Result<bool, ClientGone> {
        let arrivals = self.pending.take_arrivals();
        self.inject(arrivals).await
    }

    /// Emits `arrivals` as `async_status` calls in a step of their own.
    async fn inject(&mut self, arrivals: Vec<Arrival>) -> Result<bool, ClientGone> {
        if arrivals.is_empty() {
            return Ok(false);
        }
        self.emitter.emit(UiChunk::StartStep).await?;
        for arrival in arrivals {
            let mut output = json!({"statusId": arrival.status_id, "tool": arrival.tool_name});
            arrival.outcome.describe_into(&mut output);
            for chunk in arrival_chunks(&arrival.status_id, output) {
                self.emitter.emit(chunk).await?;
            }
        }
        self.emitter.emit(UiChunk::FinishStep).await?;
        Ok(true)
    }

    /// Before pausing for approval: waits for background calls and records
    /// their results, since nothing else would receive them.
    async fn settle_background_work(&mut self) -> Result<(), ClientGone> {
        while self.pending.is_running() {
            tokio::select! {
                () = self.pending.wait_for_one() => {}
                () = self.emitter.gone() => return Err(ClientGone),
            }
        }
        self.pending.collect_finished();
        self.inject_arrivals().await.map(|_| ())
    }

    fn model_request(&self, pass: u32) -> ModelRequest {
        let messages = self
            .plan
            .history
            .iter()
            .map(|message| &**message)
            .chain([&self.emitter.assistant]);
        ModelRequest {
            model_id: self.plan.model_id.clone(),
            system: self.plan.system.clone(),
            messages: to_model_history(messages),
            tools: self.registry.specs(),
            provider_tools: self.registry.provider_tools().to_vec(),
            options: self.plan.options.clone(),
            idempotency_key: self
                .plan
                .request_key
                .as_ref()
                .map(|key| format!("{key}.{pass}")),
        }
    }
}

/// Ends the calls that never finished: a denied one as denied, the others
/// as failed with `reason` (and the last output they yielded, if any); and
/// closes open text.
pub fn mark_unfinished(message: &mut UiMessage, reason: &str) {
    for part in &mut message.parts {
        match part {
            UiPart::Tool(tool)
                if tool.state == ToolState::ApprovalResponded && !tool.is_approved() =>
            {
                tool.state = ToolState::OutputDenied;
            }
            UiPart::Tool(tool)
                if !tool.is_settled() && tool.state != ToolState::ApprovalRequested =>
            {
                let error_text = tool.failure_text(reason);
                tool.fail(error_text);
            }
            UiPart::Text { state, .. } => *state = Some("done".into()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfinished_calls_end_in_a_state_that_keeps_what_they_had() {
        let mut message: UiMessage = serde_json::from_value(json!({"id": "m", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "Work", "state": "streaming"},
            {"type": "tool-p", "toolCallId": "yielded", "state": "output-available", "input": {}, "output": {"step": 1}, "preliminary": true},
            {"type": "tool-p", "toolCallId": "running", "state": "input-available", "input": {}},
            {"type": "tool-p", "toolCallId": "denied", "state": "approval-responded", "input": {}, "approval": {"id": "a1", "approved": false}},
            {"type": "tool-p", "toolCallId": "approved", "state": "approval-responded", "input": {}, "approval": {"id": "a2", "approved": true}},
            {"type": "tool-p", "toolCallId": "asked", "state": "approval-requested", "input": {}, "approval": {"id": "a3"}},
        ]}))
        .unwrap();
        mark_unfinished(&mut message, "stopped");
        let parts = serde_json::to_value(&message).unwrap()["parts"].clone();
        assert_eq!(
            parts[1],
            json!({"type": "text", "text": "Work", "state": "done"})
        );
        assert_eq!(
            parts[2],
            json!({"type": "tool-p", "toolCallId": "yielded", "state": "output-error", "input": {},
                   "errorText": "stopped; its last output before that was {\"step\":1}"})
        );
        assert_eq!(parts[3]["errorText"], "stopped");
        assert_eq!(
            parts[4],
            json!({"type": "tool-p", "toolCallId": "denied", "state": "output-denied", "input": {},
                   "approval": {"id": "a1", "approved": false}})
        );
        assert_eq!(
            parts[5],
            json!({"type": "tool-p", "toolCallId": "approved", "state": "output-error", "input": {},
                   "errorText": "stopped", "approval": {"id": "a2", "approved": true}})
        );
        assert_eq!(parts[6]["state"], "approval-requested");
    }
}
