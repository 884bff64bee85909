//! The tool calls of one model pass: parse and check each call's input, put
//! it to the policies in force (a denied call fails, naming the policy; one
//! they ask about waits for approval like `needsApproval`), ask for
//! approval where needed, launch async calls in the background, and run
//! the rest concurrently (up to a limit), streaming their outputs.

use futures::StreamExt;
use serde_json::{json, Value};

use super::detach::{DetachedCall, Detacher};
use super::emitter::{ClientGone, Emitter};
use super::pass::ModelCall;
use super::pending::PendingWork;
use super::place::call_place;
use super::retry::with_retries;
use super::TurnPlan;
use crate::ledger::{idempotency_key, CallPlace, CalledTool, TurnLedger};
use crate::policy::Decision;
use crate::tools::{RegisteredTool, ToolEvent, ToolRegistry};
use crate::ui::UiChunk;
use toolserver_domain::agent::ASYNC_STATUS_TOOL;
use toolserver_domain::{AttemptStatus, ToolEffects};

/// How the refusal of a call that needs approval ends, on a request path
/// where no person can be asked (detached turns, channels).
pub const APPROVAL_UNAVAILABLE: &str =
    "which this request path cannot ask for; the call was denied";

/// How the failure of a call that needs a connection ends, on a request
/// path that cannot wait for it (channels): the link was shown instead.
const AUTHORIZATION_LINKED: &str =
    "the link to connect it was shown to them; the call was not run, and runs once they have connected and ask again";

/// A call whose input is valid and that may run now.
pub(super) struct ReadyCall {
    pub(super) tool_call_id: String,
    pub(super) tool: RegisteredTool,
    pub(super) input: Value,
    pub(super) place: CallPlace,
}

/// Where the call `tool_call_id` (already in the assistant message) sits,
/// and its idempotency key: derived from its place when the turn is
/// recorded, else its call id.
pub(super) fn place_of(
    emitter: &Emitter,
    ledger: Option<&TurnLedger>,
    tool_call_id: &str,
) -> CallPlace {
    let (step, seq) = call_place(&emitter.assistant, tool_call_id).unzip();
    let idempotency_key = match (ledger, step, seq) {
        (Some(ledger), Some(step), Some(seq)) => {
            idempotency_key(&ledger.scope.account, &emitter.assistant.id, step, seq)
        }
        _ => tool_call_id.to_owned(),
    };
    CallPlace {
        tool_call_id: Some(tool_call_id.to_owned()),
        step,
        seq,
        idempotency_key,
        queued_at: time::OffsetDateTime::now_utc(),
        attempt: 1,
    }
}

/// Whether a call waits for its end user to connect a provider.
pub(super) enum Authorization {
    /// The tool needs no connection, or the end user has it.
    NotNeeded,
    /// The end user was asked (a `data-authorization` part); the call waits.
    Asked,
    /// The end user cannot be asked; the call fails with this.
    Unavailable(String),
}

/// Asks `plan`'s end user to authorize the connection `tool` acts through,
/// when they have none. A turn that cannot ask (a chat channel's) shows the
/// link all the same, and the call fails: the user connects, then asks
/// again.
pub(super) async fn ask_authorization(
    emitter: &mut Emitter,
    plan: &TurnPlan,
    tool: &RegisteredTool,
    tool_call_id: &str,
) -> Result<Authorization, ClientGone> {
    let (Some(authorizer), Some(provider)) = (&plan.authorizer, tool.connection()) else {
        return Ok(Authorization::NotNeeded);
    };
    let message = emitter.assistant.id.clone();
    let asked = match plan.can_ask_approval {
        true => {
            authorizer
                .ask(provider, (&message, tool_call_id, &tool.name))
                .await
        }
        false => authorizer.link(provider, tool_call_id).await,
    };
    match asked {
        Ok(None) => Ok(Authorization::NotNeeded),
        Ok(Some(asked)) => {
            emitter
                .emit(UiChunk::DataAuthorization {
                    id: asked.started.id.clone(),
                    data: asked.data(),
                })
                .await?;
            match plan.can_ask_approval {
                true => Ok(Authorization::Asked),
                false => Ok(Authorization::Unavailable(format!(
                    "{} acts through the end user's connection to {provider}, which they have not made; {AUTHORIZATION_LINKED}",
                    tool.name
                ))),
            }
        }
        Err(err) => Ok(Authorization::Unavailable(format!(
            "{} acts through a connection to {provider}, which cannot be authorized now: {err}",
            tool.name
        ))),
    }
}

/// Handles the calls of a pass. Returns whether any call waits for a
/// person: an approval, or an authorization.
pub(super) async fn handle_calls(
    emitter: &mut Emitter,
    registry: &ToolRegistry,
    pending: &mut PendingWork,
    calls: Vec<ModelCall>,
    plan: &TurnPlan,
) -> Result<bool, ClientGone> {
    let max_parallel = plan.max_parallel_tool_calls;
    let can_ask_approval = plan.can_ask_approval;
    let detach = plan.detach.as_deref();
    let durable = plan.durable_status.as_deref();
    let ledger = plan.ledger.as_ref();
    let mut ready = Vec::new();
    let mut detached = Vec::new();
    let mut awaiting_approval = false;
    for call in calls {
        let raw = if call.arguments.trim().is_empty() {
            "{}"
        } else {
            call.arguments.as_str()
        };
        let input: Value = match serde_json::from_str(raw) {
            Ok(input) => input,
            Err(err) => {
                let error_text = format!("the arguments are not valid JSON: {err}");
                input_error(
                    emitter,
                    ledger,
                    &call,
                    Value::String(call.arguments.clone()),
                    error_text,
                )
                .await?;
                continue;
            }
        };
        if call.name == ASYNC_STATUS_TOOL && registry.has_async() {
            emitter.emit(input_available(&call, &input)).await?;
            let answer = match pending.status_call(&input) {
                Err(unknown) => match durable {
                    Some(durable) => {
                        let status_id = input["statusId"].as_str().unwrap_or_default();
                        let action = input["action"].as_str().unwrap_or("status");
                        durable
                            .answer(status_id, action)
                            .await
                            .unwrap_or(Err(unknown))
                    }
                    None => Err(unknown),
                },
                known => known,
            };
            let chunk = match answer {
                Ok(output) => output_chunk(&call.id, output, None),
                Err(error_text) => UiChunk::ToolOutputError {
                    tool_call_id: call.id.clone(),
                    error_text,
                },
            };
            emitter.emit(chunk).await?;
            continue;
        }
        let Some(tool) = registry.get(&call.name) else {
            let error_text = format!("there is no tool named {:?}", call.name);
            input_error(emitter, ledger, &call, input, error_text).await?;
            continue;
        };
        if let Err(error_text) = tool.check_input(&input) {
            input_error(emitter, ledger, &call, input, error_text).await?;
            continue;
        }
        emitter.emit(input_available(&call, &input)).await?;
        let verdict = registry.verdict(tool, &input);
        let decision = verdict.as_ref().map_or(Decision::Allow, |v| v.decision);
        let needs_approval = tool.needs_approval || decision == Decision::Ask;
        if decision != Decision::Deny && !needs_approval {
            match ask_authorization(emitter, plan, tool, &call.id).await? {
                Authorization::NotNeeded => {}
                Authorization::Asked => {
                    awaiting_approval = true;
                    continue;
                }
                Authorization::Unavailable(error_text) => {
                    refuse(emitter, ledger, &call.id, tool, &input, error_text).await?;
                    continue;
                }
            }
        }
        if let (Decision::Deny, Some(verdict)) = (decision, &verdict) {
            let error_text = verdict.explain(&tool.name);
            refuse(emitter, ledger, &call.id, tool, &input, error_text).await?;
        } else if needs_approval && !can_ask_approval {
            let why = match &verdict {
                Some(verdict) if decision == Decision::Ask => {
                    format!(" ({})", verdict.reasons.join("; "))
                }
                _ => String::new(),
            };
            let error_text = format!(
                "{} needs a person's approval{why}, {APPROVAL_UNAVAILABLE}",
                tool.name
            );
            refuse(emitter, ledger, &call.id, tool, &input, error_text).await?;
        } else if needs_approval {
            let approval_id = format!("apr_{}", uuid::Uuid::new_v4().simple());
            emitter
                .emit(UiChunk::ToolApprovalRequest {
                    approval_id,
                    tool_call_id: call.id.clone(),
                })
                .await?;
            awaiting_approval = true;
        } else if tool.run_async && detach.is_some() && tool.detachable() {
            let place = place_of(emitter, ledger, &call.id);
            detached.push(ReadyCall {
                tool_call_id: call.id,
                tool: tool.clone(),
                input,
                place,
            });
        } else if tool.run_async {
            let place = place_of(emitter, ledger, &call.id);
            let events = with_retries(ledger, tool, &place, input);
            let output = pending.launch(tool, events);
            emitter.emit(output_chunk(&call.id, output, None)).await?;
        } else {
            let place = place_of(emitter, ledger, &call.id);
            ready.push(ReadyCall {
                tool_call_id: call.id,
                tool: tool.clone(),
                input,
                place,
            });
        }
    }
    if let Some(detach) = detach {
        launch_detached(emitter, detach, detached).await?;
    }
    run_ready(emitter, ready, max_parallel, ledger).await?;
    Ok(awaiting_approval)
}

/// Refuses the call `tool_call_id` of `tool` with `error_text`, which the
/// model reads as the call's failure; the ledger records it as denied.
pub(super) async fn refuse(
    emitter: &mut Emitter,
    ledger: Option<&TurnLedger>,
    tool_call_id: &str,
    tool: &RegisteredTool,
    input: &Value,
    error_text: String,
) -> Result<(), ClientGone> {
    if let Some(ledger) = ledger {
        let place = place_of(emitter, Some(ledger), tool_call_id);
        let status = AttemptStatus::Denied;
        ledger.refused(&place, CalledTool::from(tool), input, status, &error_text);
    }
    emitter
        .emit(UiChunk::ToolOutputError {
            tool_call_id: tool_call_id.to_owned(),
            error_text,
        })
        .await
}

/// Runs calls, emitting each preliminary snapshot, then the final output or
/// the error: calls of tools with side effects one at a time in the
/// model's order, the others concurrently, up to `max_parallel` at a time
/// in all; each tried again as its tool allows ([`with_retries`]).
pub(super) async fn run_ready(
    emitter: &mut Emitter,
    ready: Vec<ReadyCall>,
    max_parallel: usize,
    ledger: Option<&TurnLedger>,
) -> Result<(), ClientGone> {
    if ready.is_empty() {
        return Ok(());
    }
    let (mut serial, mut parallel) = (Vec::new(), Vec::new());
    for call in ready {
        let id = call.tool_call_id.clone();
        let events = with_retries(ledger, &call.tool, &call.place, call.input)
            .map(move |event| (id.clone(), event));
        match call.tool.effects {
            ToolEffects::SideEffect => serial.push(events),
            ToolEffects::Read | ToolEffects::Idempotent => parallel.push(events),
        }
    }
    // Side-effect calls one at a time, in the model's order, beside the
    // others in parallel; together within the cap.
    let slots = match serial.is_empty() {
        true => max_parallel,
        false => max_parallel.saturating_sub(1),
    };
    let serial = futures::stream::iter(serial).flatten().boxed();
    let parallel = futures::stream::iter(parallel)
        .flatten_unordered(slots.max(1))
        .boxed();
    let mut merged = futures::stream::select(serial, parallel);
    loop {
        let next = tokio::select! {
            next = merged.next() => next,
            () = emitter.gone() => return Err(ClientGone),
        };
        let Some((tool_call_id, event)) = next else {
            return Ok(());
        };
        let chunk = match event {
            ToolEvent::Log { .. } => continue,
            ToolEvent::Snapshot(value) => output_chunk(&tool_call_id, value, Some(true)),
            ToolEvent::Output(value) => output_chunk(&tool_call_id, value, None),
            ToolEvent::Failed(error) => failed(emitter, tool_call_id, &error.message),
            ToolEvent::Launched => failed(
                emitter,
                tool_call_id,
                "the runner detached a call that was not sent detached",
            ),
        };
        emitter.emit(chunk).await?;
    }
}

/// The end of a call that failed with `error`, carrying the last output it
/// yielded before, if any (see [`crate::ui::ToolPart::failure_text`]).
fn failed(emitter: &Emitter, tool_call_id: String, error: &str) -> UiChunk {
    let error_text = emitter
        .assistant
        .tool_part(&tool_call_id)
        .map_or_else(|| error.to_owned(), |part| part.failure_text(error));
    UiChunk::ToolOutputError {
        tool_call_id,
        error_text,
    }
}

/// What the model is told of a detached call it just made: it is pending.
pub fn pending_output(tool_name: &str, status_id: &str) -> Value {
    json!({
        "status": "pending",
        "statusId": status_id,
        "message": format!(
            "{tool_name} is running in the background; its result will be delivered when it \
             is ready. async_status can check on it."
        ),
    })
}

/// Records a pass's detached calls together, then launches each; the model
/// is told each call is pending (or why it could not start).
async fn launch_detached(
    emitter: &mut Emitter,
    detach: &dyn Detacher,
    calls: Vec<ReadyCall>,
) -> Result<(), ClientGone> {
    if calls.is_empty() {
        return Ok(());
    }
    let described: Vec<DetachedCall<'_>> = calls
        .iter()
        .map(|call| DetachedCall {
            tool_call_id: &call.tool_call_id,
            tool: &call.tool,
            input: &call.input,
        })
        .collect();
    let registered = detach.register_pass(&described).await;
    drop(described);
    let registered = match registered {
        Ok(registered) => registered,
        Err(error) => {
            for call in calls {
                emitter
                    .emit(UiChunk::ToolOutputError {
                        tool_call_id: call.tool_call_id,
                        error_text: error.clone(),
                    })
                    .await?;
            }
            return Ok(());
        }
    };
    for (call, (status_id, meta)) in calls.into_iter().zip(registered) {
        let chunk = launch_one(emitter, detach, call, &status_id, meta).await?;
        emitter.emit(chunk).await?;
    }
    Ok(())
}

/// Launches one recorded call on its runner.
async fn launch_one(
    emitter: &Emitter,
    detach: &dyn Detacher,
    call: ReadyCall,
    status_id: &str,
    meta: Value,
) -> Result<UiChunk, ClientGone> {
    let ReadyCall {
        tool_call_id,
        tool,
        input,
        place: _,
    } = call;
    let failed = |error_text: String| UiChunk::ToolOutputError {
        tool_call_id: tool_call_id.clone(),
        error_text,
    };
    let launched = tokio::select! {
        launched = launch(&tool, tool_call_id.clone(), input, meta) => launched,
        () = emitter.gone() => return Err(ClientGone),
    };
    match launched {
        Launch::Running => {}
        // The runner ran the call to its end instead of detaching it: its
        // outcome settles the call, and reaches the model through the
        // continuation like any other.
        Launch::Ended(value) => detach.ended_at_launch(status_id, Ok(value)).await,
        Launch::Failed(error) => {
            detach.ended_at_launch(status_id, Err(error.clone())).await;
            return Ok(failed(error));
        }
    }
    Ok(output_chunk(
        &tool_call_id,
        pending_output(&tool.name, status_id),
        None,
    ))
}

/// How launching a detached call went.
pub enum Launch {
    /// The call runs on its runner.
    Running,
    /// The runner ran it to its end at once, with this output.
    Ended(Value),
    /// It could not be launched, or failed at once.
    Failed(String),
}

/// Sends a detached call to `tool`'s runner and waits for the launch.
pub async fn launch(
    tool: &RegisteredTool,
    tool_call_id: String,
    input: Value,
    meta: Value,
) -> Launch {
    let Some(mut events) = tool.call_detached(tool_call_id, input, meta) else {
        return Launch::Failed(format!("{} cannot run detached", tool.name));
    };
    loop {
        match events.next().await {
            Some(ToolEvent::Launched) => return Launch::Running,
            Some(ToolEvent::Output(value)) => return Launch::Ended(value),
            Some(ToolEvent::Failed(error)) => return Launch::Failed(error.message),
            Some(_) => continue,
            None => return Launch::Failed("the runner did not launch the call".to_owned()),
        }
    }
}

fn input_available(call: &ModelCall, input: &Value) -> UiChunk {
    UiChunk::ToolInputAvailable {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        input: input.clone(),
        provider_metadata: call.provider_metadata.clone(),
    }
}

fn output_chunk(tool_call_id: &str, output: Value, preliminary: Option<bool>) -> UiChunk {
    UiChunk::ToolOutputAvailable {
        tool_call_id: tool_call_id.to_owned(),
        output,
        preliminary,
    }
}

/// Tells the model its call's input was refused, and records the refusal.
async fn input_error(
    emitter: &mut Emitter,
    ledger: Option<&TurnLedger>,
    call: &ModelCall,
    input: Value,
    error_text: String,
) -> Result<(), ClientGone> {
    let refused = ledger.map(|ledger| (ledger, input.clone(), error_text.clone()));
    emitter
        .emit(UiChunk::ToolInputError {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            input,
            error_text,
        })
        .await?;
    if let Some((ledger, input, error_text)) = refused {
        let place = place_of(emitter, Some(ledger), &call.id);
        let tool = CalledTool {
            name: &call.name,
            tool_id: None,
            version: None,
        };
        ledger.refused(&place, tool, &input, AttemptStatus::InputError, &error_text);
    }
    Ok(())
}

/// The call that tells the model about finished background work.
pub(super) fn arrival_chunks(status_id: &str, output: Value) -> [UiChunk; 2] {
    let tool_call_id = format!("call_{status_id}");
    [
        UiChunk::ToolInputAvailable {
            tool_call_id: tool_call_id.clone(),
            tool_name: ASYNC_STATUS_TOOL.to_owned(),
            input: json!({"statusId": status_id, "action": "status"}),
            provider_metadata: None,
        },
        UiChunk::ToolOutputAvailable {
            tool_call_id,
            output,
            preliminary: None,
        },
    ]
}
