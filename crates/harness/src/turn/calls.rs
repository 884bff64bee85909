//! The tool calls of one model pass: parse and check each call's input, ask
//! for approval where needed, launch async calls in the background, and run
//! the rest concurrently (up to a limit), streaming their outputs.

use futures::StreamExt;
use serde_json::{json, Value};

use super::detach::Detacher;
use super::emitter::{ClientGone, Emitter};
use super::pass::ModelCall;
use super::pending::PendingWork;
use super::TurnPlan;
use crate::tools::{RegisteredTool, ToolEvent, ToolRegistry};
use crate::ui::UiChunk;
use toolserver_domain::agent::ASYNC_STATUS_TOOL;

/// A call whose input is valid and that may run now.
pub(super) struct ReadyCall {
    pub(super) tool_call_id: String,
    pub(super) tool: RegisteredTool,
    pub(super) input: Value,
}

/// Handles the calls of a pass. Returns whether any call waits for approval.
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
    let mut ready = Vec::new();
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
            input_error(emitter, &call, input, error_text).await?;
            continue;
        };
        if let Err(error_text) = tool.check_input(&input) {
            input_error(emitter, &call, input, error_text).await?;
            continue;
        }
        emitter.emit(input_available(&call, &input)).await?;
        if tool.needs_approval && !can_ask_approval {
            let error_text = format!(
                "{} needs a person's approval, which this request path cannot ask for; the call was denied",
                tool.name
            );
            emitter
                .emit(UiChunk::ToolOutputError {
                    tool_call_id: call.id.clone(),
                    error_text,
                })
                .await?;
        } else if tool.needs_approval {
            let approval_id = format!("apr_{}", uuid::Uuid::new_v4().simple());
            emitter
                .emit(UiChunk::ToolApprovalRequest {
                    approval_id,
                    tool_call_id: call.id.clone(),
                })
                .await?;
            awaiting_approval = true;
        } else if tool.run_async {
            let chunk = match detach {
                Some(detach) if tool.detachable() => {
                    launch_detached(emitter, detach, tool, &call.id, input).await?
                }
                _ => output_chunk(&call.id, pending.launch(tool, call.id.clone(), input), None),
            };
            emitter.emit(chunk).await?;
        } else {
            ready.push(ReadyCall {
                tool_call_id: call.id,
                tool: tool.clone(),
                input,
            });
        }
    }
    run_ready(emitter, ready, max_parallel).await?;
    Ok(awaiting_approval)
}

/// Runs calls concurrently, up to `max_parallel` at a time, emitting each
/// preliminary snapshot, then the final output or the error.
pub(super) async fn run_ready(
    emitter: &mut Emitter,
    ready: Vec<ReadyCall>,
    max_parallel: usize,
) -> Result<(), ClientGone> {
    if ready.is_empty() {
        return Ok(());
    }
    let streams = ready.into_iter().map(|call| {
        let id = call.tool_call_id.clone();
        call.tool
            .call(call.tool_call_id, call.input)
            .map(move |event| (id.clone(), event))
    });
    let mut merged = futures::stream::iter(streams).flatten_unordered(max_parallel.max(1));
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
            ToolEvent::Failed(error_text) => UiChunk::ToolOutputError {
                tool_call_id,
                error_text,
            },
        };
        emitter.emit(chunk).await?;
    }
}

/// Registers and launches a detached call; the chunk tells the model it is
/// pending (or why it could not start).
async fn launch_detached(
    emitter: &Emitter,
    detach: &dyn Detacher,
    tool: &RegisteredTool,
    tool_call_id: &str,
    input: Value,
) -> Result<UiChunk, ClientGone> {
    let failed = |error_text: String| UiChunk::ToolOutputError {
        tool_call_id: tool_call_id.to_owned(),
        error_text,
    };
    let (status_id, meta) = match detach
        .register(tool_call_id, &tool.name, tool.tool_id)
        .await
    {
        Ok(registered) => registered,
        Err(error) => return Ok(failed(error)),
    };
    let Some(mut events) = tool.call_detached(tool_call_id.to_owned(), input, meta) else {
        let error = format!("{} cannot run detached", tool.name);
        detach.launch_failed(&status_id, &error).await;
        return Ok(failed(error));
    };
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            () = emitter.gone() => return Err(ClientGone),
        };
        let error = match event {
            Some(ToolEvent::Output(_)) => break,
            Some(ToolEvent::Failed(error)) => error,
            Some(_) => continue,
            None => "the runner did not launch the call".to_owned(),
        };
        detach.launch_failed(&status_id, &error).await;
        return Ok(failed(error));
    }
    let output = json!({
        "status": "pending",
        "statusId": status_id,
        "message": format!(
            "{} is running in the background; its result will be delivered when it is ready. \
             async_status can check on it.",
            tool.name
        ),
    });
    Ok(output_chunk(tool_call_id, output, None))
}

fn input_available(call: &ModelCall, input: &Value) -> UiChunk {
    UiChunk::ToolInputAvailable {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        input: input.clone(),
    }
}

fn output_chunk(tool_call_id: &str, output: Value, preliminary: Option<bool>) -> UiChunk {
    UiChunk::ToolOutputAvailable {
        tool_call_id: tool_call_id.to_owned(),
        output,
        preliminary,
    }
}

async fn input_error(
    emitter: &mut Emitter,
    call: &ModelCall,
    input: Value,
    error_text: String,
) -> Result<(), ClientGone> {
    emitter
        .emit(UiChunk::ToolInputError {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            input,
            error_text,
        })
        .await
}

/// The call that tells the model about finished background work.
pub(super) fn arrival_chunks(status_id: &str, output: Value) -> [UiChunk; 2] {
    let tool_call_id = format!("call_{status_id}");
    [
        UiChunk::ToolInputAvailable {
            tool_call_id: tool_call_id.clone(),
            tool_name: ASYNC_STATUS_TOOL.to_owned(),
            input: json!({"statusId": status_id, "action": "status"}),
        },
        UiChunk::ToolOutputAvailable {
            tool_call_id,
            output,
            preliminary: None,
        },
    ]
}
