//! `POST /accounts/me/tools/{toolId}/invoke`: run an account's tool directly.
//!
//! Sequence: load the tool (404 if not the caller's; read and compiled once,
//! then from the tool cache while it is current) → validate the input
//! against its `inputSchema` (422) → put the call to the account's
//! policies (403 when they deny it or ask a person) → merge `config` over `defaultConfig` →
//! hand the bundle to the runner (inline up to the configured size, otherwise
//! a signed URL; an HTTP tool's request is made by the server instead) → answer with the result as JSON, or, with `Accept:
//! text/event-stream`, stream `log` and `chunk` events as they happen and end
//! with a `result` or `error` event. A failing tool is a result (`error`),
//! not an HTTP failure. A client that goes away cancels its call. With an
//! `Idempotency-Key`, the key is claimed before any of this and a repeat is
//! answered from it (see `idempotency`).

use std::convert::Infallible;
use std::time::Duration;

use futures::StreamExt;

use axum::extract::{Path, State};
use axum::http::header::ACCEPT;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream::Stream;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolserver_domain::tool::violations;
use toolserver_domain::{AccountId, AttemptStatus, CallPath, LimitKind, ToolId, ValidationError};
use toolserver_harness::ledger::{Attempt, CallPlace, CallScope, CalledTool};
use toolserver_harness::policy::{CallGate, Decision, Narrowing};
use toolserver_harness::runner_call::{self, CallSpec, RunnerCall, RunnerCallSettings};
use toolserver_harness::tools::{
    fetch_minter, server_call, Failure, FailureKind, Invocation, ToolEvent, ToolEvents,
};
use toolserver_sandbox::{Frame, InvokeRequest, ReservationKey, SandboxError};
use toolserver_store::{ToolBody, ToolRecord};
use utoipa::ToSchema;

use super::{parse_tool_id, tool_not_found};
use crate::admission::{Permit, Refusal};
use crate::auth::{Account, EndUser};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::sorted::sorted_keys;
use crate::state::AppState;
use idempotency::{Begin, Claim};
use outcome::Outcome;
use toolserver_harness::connections::ACCOUNT_USER;

mod fingerprint;
mod idempotency;
mod outcome;
mod replay;

/// A direct call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvokeBody {
    /// Tool input; validated against the tool's `inputSchema`.
    #[schema(value_type = Object)]
    pub input: Value,
    /// Options merged over the tool's `defaultConfig` (reach the tool as `ctx.config`).
    #[schema(value_type = Option<Object>)]
    pub config: Option<Map<String, Value>>,
    /// Deadline in milliseconds (default and maximum are server settings).
    #[serde(default, deserialize_with = "crate::extract::optional_whole_u64")]
    pub timeout_ms: Option<u64>,
}

/// A failed tool call, as the tool (or the runner) reported it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ToolError {
    /// Error class, e.g. `TypeError`, `DeadlineExceeded`, `OutputTooLarge`.
    pub name: String,
    /// What happened.
    pub message: String,
}

/// The outcome of a call: `output` on success, `error` when the tool failed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvokeResult {
    /// Id of this call.
    pub call_id: String,
    /// The returned value (a generator's last yield).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    /// Present when the tool failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// Console output of the call, in order.
    pub logs: Vec<LogLine>,
}

/// One line of a tool's console output.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LogLine {
    /// `log`, `info`, `warn`, `error` or `debug`.
    pub level: String,
    /// The text.
    pub message: String,
}

/// Runs one of the caller's tools.
#[utoipa::path(post, path = "/accounts/me/tools/{toolId}/invoke", tag = "tools",
    security(("bearer" = [])),
    params(
        ("toolId" = String, Path, description = "Tool id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a repeat safe: the first request with the key runs the call and keeps its result (`TOOLSERVER_INVOKE_IDEMPOTENCY_TTL_SECS`, 24 h by default); the same request again within that time gets the kept result, without running anything. 1 to 255 printable ASCII characters, scoped to the account. Passed to the tool as ctx.idempotencyKey (without it, the call id is)"),
    ),
    request_body = InvokeBody,
    responses(
        (status = 200, description = "The call's result (JSON), or with Accept: text/event-stream an SSE stream of `log`, `chunk`, then `result` or `error` events. A replay for an `Idempotency-Key` is the kept result (as SSE: its `log` events, then `result` or `error`)",
            headers(("Idempotent-Replayed" = String, description = "`true` when the response replays the kept result of an earlier request with the same `Idempotency-Key`")),
            content(
                (InvokeResult = "application/json"),
                (String = "text/event-stream"),
            )),
        (status = 400, description = "Malformed body or unknown field, or an `Idempotency-Key` that is not 1 to 255 printable ASCII characters", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "The account's policies deny the call (`policy_denied`) or ask a person first, which a direct call cannot (`approval_required`); the message names the policies", body = ErrorBody),
        (status = 404, description = "No such tool in this account", body = ErrorBody),
        (status = 409, description = "The `Idempotency-Key` belongs to a call still running (`idempotency_key_in_use`, with `Retry-After`), or to a call cut off before its end, whose outcome is unknown and which is not run again while the key is kept (`idempotency_outcome_unknown`)", body = ErrorBody,
            headers(("Retry-After" = u32, description = "With `idempotency_key_in_use`: seconds until a repeat may find the call ended"))),
        (status = 422, description = "Input does not match the tool's inputSchema, or the `Idempotency-Key` was used for another tool or body", body = ErrorBody),
        (status = 429, description = "A limit of the account is reached (`concurrentCalls`, `callsPerMinute`, `liveRunners`); see `Retry-After`", body = ErrorBody),
        (status = 503, description = "No runner could be reached, or the server's runners are all taken (`capacity_exhausted`, with `Retry-After`)", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all, fields(tool.id = %tool_id, call.id = tracing::field::Empty))]
pub async fn invoke_tool(
    Account(account): Account,
    EndUser(user): EndUser,
    State(state): State<AppState>,
    Path(tool_id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<InvokeBody>,
) -> ApiResult<Response> {
    let id = parse_tool_id(&tool_id)?;
    let scope = CallScope {
        subject: user,
        ..CallScope::direct(account.clone(), CallPath::Invoke)
    };
    let claim = match idempotency::begin(&state, &account, id, &headers, &body).await? {
        Begin::Run(claim) => claim,
        Begin::Replayed(response, result, key) => {
            record_replay(&state, &scope, id, &key, &body, &result).await?;
            return Ok(response);
        }
        Begin::Answered(response) => return Ok(response),
    };
    let call = match start_call(&state, &scope, id, &headers, body).await {
        Ok(started) => Call::new(started, claim),
        Err(refusal) => return Err(claim.release(refusal).await),
    };
    if wants_event_stream(&headers) {
        Ok(Sse::new(sse_events(call))
            .keep_alive(KeepAlive::default())
            .into_response())
    } else {
        Ok(Json(call.into_result().await).into_response())
    }
}

/// A call its runner took (or the server runs, for an HTTP tool), with
/// its place among the account's calls and its attempt in the ledger.
struct Started {
    call: Running,
    permit: Permit,
    attempt: Attempt,
}

/// Everything up to the call's start on its runner (recorded in the ledger
/// first); an error here means nothing ran.
async fn start_call(
    state: &AppState,
    scope: &CallScope,
    id: ToolId,
    headers: &HeaderMap,
    body: InvokeBody,
) -> ApiResult<Started> {
    let account = &scope.account;
    let permit = state.admission().call(account).await?;
    let cached = state
        .tools()
        .get(account, id)
        .await
        .map_err(tool_not_found)?;
    let checked = match &cached.validator {
        Ok(validator) => violations(validator, &body.input),
        Err(err) => Err(vec![err.clone()]),
    };
    if let Err(problems) = checked {
        let message = format!("input does not match inputSchema: {}", problems.join("; "));
        return Err(ValidationError::new("input", message).into());
    }
    let tool = &cached.record;
    let call_id = uuid::Uuid::new_v4().to_string();
    tracing::Span::current().record("call.id", call_id.as_str());
    let idempotency_key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| call_id.clone(), str::to_owned);
    let input = body.input.clone();
    let place = CallPlace::direct(call_id.clone(), idempotency_key.clone());
    judge(state, scope, &place, tool, &input).await?;
    let timeout = call_timeout(state, &body)?;
    if let ToolBody::Http(_) = tool.body {
        let attempt = state
            .lifecycle()
            .ledger()
            .begin(scope, &place, CalledTool::from(tool), &input)
            .map_err(ApiError::Unavailable)?;
        let invocation = Invocation {
            tool_call_id: call_id.clone(),
            idempotency_key,
            input,
            timeout,
        };
        let user = scope.subject.as_deref().unwrap_or(ACCOUNT_USER);
        let events = server_call(state.harness().sources(), (account, user), tool, invocation)
            .ok_or_else(|| ApiError::Unavailable("the tool has no server call".into()))?;
        return Ok(Started {
            call: Running::Server { call_id, events },
            permit,
            attempt,
        });
    }
    let call = (call_id, idempotency_key, timeout);
    let user = scope.subject.as_deref().unwrap_or(ACCOUNT_USER);
    let request = build_request(state, (account, user), tool, body, call).await?;
    let attempt = state
        .lifecycle()
        .ledger()
        .begin(scope, &place, CalledTool::from(tool), &input)
        .map_err(ApiError::Unavailable)?;
    let key = ReservationKey::new(account.clone(), tool.id);
    match RunnerCall::start(state.executor().clone(), key, request).await {
        Ok(call) => Ok(Started {
            call: Running::Runner(call),
            permit,
            attempt,
        }),
        Err(err) => {
            let error = runner_error(state, account, err);
            attempt.ended(refusal_status(&error), &error.to_string());
            Err(error)
        }
    }
}

/// Puts the call to the account's policies: one they deny, or ask a
/// person about (which a direct call cannot), is a 403 naming them,
/// recorded in the ledger as `denied`.
async fn judge(
    state: &AppState,
    scope: &CallScope,
    place: &CallPlace,
    tool: &ToolRecord,
    input: &Value,
) -> ApiResult<()> {
    let narrowing = Narrowing {
        user: scope.subject.as_deref(),
        conversation: None,
    };
    let stack = state
        .harness()
        .policy_stack(&scope.account, None, narrowing)
        .await?;
    let gate = CallGate::new(stack, scope.subject.clone(), CallPath::Invoke);
    let verdict = gate.decide(&tool.name, tool.effects, input);
    let code = match verdict.decision {
        Decision::Allow => return Ok(()),
        Decision::Ask => "approval_required",
        Decision::Deny => "policy_denied",
    };
    let message = match verdict.decision {
        Decision::Ask => format!(
            "{}; a direct call cannot wait for approval",
            verdict.explain(&tool.name)
        ),
        _ => verdict.explain(&tool.name),
    };
    let ledger = state.lifecycle().ledger();
    ledger.refused(
        scope,
        place,
        CalledTool::from(tool),
        input,
        AttemptStatus::Denied,
        &message,
    );
    Err(ApiError::PolicyRefused { code, message })
}

/// Records a repeat answered from the kept result of key `key`: an attempt
/// of its own that ran nothing.
async fn record_replay(
    state: &AppState,
    scope: &CallScope,
    id: ToolId,
    key: &str,
    body: &InvokeBody,
    result: &InvokeResult,
) -> ApiResult<()> {
    let cached = state
        .tools()
        .get(&scope.account, id)
        .await
        .map_err(tool_not_found)?;
    let place = CallPlace::direct(result.call_id.clone(), key.to_owned());
    let attempt = state
        .lifecycle()
        .ledger()
        .begin(scope, &place, CalledTool::from(&cached.record), &body.input)
        .map_err(ApiError::Unavailable)?;
    let error = result
        .error
        .as_ref()
        .map(|error| format!("{}: {}", error.name, error.message));
    attempt.finish(
        AttemptStatus::Replayed,
        result.output.as_ref(),
        error.as_deref(),
    );
    Ok(())
}

/// How the ledger records a call no runner took.
fn refusal_status(error: &ApiError) -> AttemptStatus {
    match error {
        ApiError::Unavailable(_) => AttemptStatus::RunnerLost,
        _ => AttemptStatus::Throttled,
    }
}

/// The deadline `body` asks for, within the server's bounds.
fn call_timeout(state: &AppState, body: &InvokeBody) -> ApiResult<Duration> {
    let settings = state.settings();
    let timeout = body
        .timeout_ms
        .map_or(settings.default_tool_timeout, Duration::from_millis);
    if timeout.is_zero() || timeout > settings.max_tool_timeout {
        return Err(ApiError::bad_field(
            "timeoutMs",
            format!(
                "timeoutMs must be between 1 and {}",
                settings.max_tool_timeout.as_millis()
            ),
        ));
    }
    Ok(timeout)
}

/// The runner request of a call `(call id, idempotency key, deadline)` of
/// `account`'s bundle tool `tool`, acting for end user `user`.
async fn build_request(
    state: &AppState,
    (account, user): (&AccountId, &str),
    tool: &ToolRecord,
    body: InvokeBody,
    (call_id, idempotency_key, timeout): (String, String, Duration),
) -> ApiResult<InvokeRequest> {
    let settings = state.settings();
    let runner = RunnerCallSettings {
        inline_bundle_max_bytes: settings.inline_bundle_max_bytes,
        signed_url_ttl: settings.signed_url_ttl,
        max_output_bytes: settings.max_output_bytes,
    };
    let spec = CallSpec {
        call_id,
        idempotency_key,
        input: body.input,
        options: body.config.unwrap_or_default(),
        timeout,
        async_meta: None,
        fetch: fetch_minter(state.harness().sources())
            .map(|minter| minter.access((account, tool.id, user), timeout)),
    };
    Ok(runner_call::build_request(state.bundles(), &runner, tool, spec).await?)
}

/// Why no runner took the call: the account's own runner cap (429), the
/// server's (503), each with `Retry-After`; else the runner is unreachable.
fn runner_error(state: &AppState, account: &AccountId, err: SandboxError) -> ApiError {
    match err {
        SandboxError::Busy {
            reason,
            retry_after,
            account_limit: true,
        } => {
            let cap = state.admission().known_limits(account).live_runners;
            Refusal::new(account, LimitKind::LiveRunners, cap, retry_after, reason).into()
        }
        SandboxError::Busy {
            reason,
            retry_after,
            account_limit: false,
        } => ApiError::Overloaded {
            message: reason,
            retry_after,
        },
        other => ApiError::Unavailable(format!("runner: {other}")),
    }
}

fn wants_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"))
}

/// A call in progress, holding its place among the account's concurrent
/// calls, its idempotency key's claim and its attempt in the ledger;
/// cancelled on the runner (and in the ledger) if dropped before its end.
struct Call {
    call: Running,
    outcome: Outcome,
    claim: Claim,
    attempt: Option<Attempt>,
    _permit: Permit,
}

impl Call {
    fn new(started: Started, claim: Claim) -> Self {
        Self {
            outcome: Outcome::new(started.call.call_id()),
            call: started.call,
            claim,
            attempt: Some(started.attempt),
            _permit: started.permit,
        }
    }

    /// The next frame; after the last, the result is stored under the key
    /// and ends the call's attempt.
    async fn next(&mut self) -> Option<Frame> {
        let frame = self.call.next().await.map(sorted_frame);
        match &frame {
            Some(frame) => self.outcome.push(frame),
            None => {
                let result = self.outcome.settled();
                if let Some(attempt) = self.attempt.take() {
                    end_attempt(attempt, result);
                }
                self.claim.store(result).await;
            }
        }
        frame
    }

    async fn into_result(mut self) -> InvokeResult {
        while self.next().await.is_some() {}
        self.outcome.into_result()
    }
}

/// A call in progress on its runner, or in the server.
enum Running {
    /// Frames from the tool's runner.
    Runner(RunnerCall),
    /// Events of a tool the server runs, read as frames.
    Server {
        /// The call's id.
        call_id: String,
        /// Its events.
        events: ToolEvents,
    },
}

impl Running {
    fn call_id(&self) -> &str {
        match self {
            Self::Runner(call) => call.call_id(),
            Self::Server { call_id, .. } => call_id,
        }
    }

    async fn next(&mut self) -> Option<Frame> {
        match self {
            Self::Runner(call) => call.next().await,
            Self::Server { events, .. } => Some(match events.next().await? {
                ToolEvent::Log { level, message } => Frame::Log { level, message },
                ToolEvent::Snapshot(value) => Frame::Chunk { value },
                ToolEvent::Output(value) => Frame::Final { value },
                ToolEvent::Failed(failure) => Frame::Error {
                    name: failure.kind.error_name().to_owned(),
                    message: failure.message,
                },
                ToolEvent::Launched => Frame::Launched,
            }),
        }
    }
}

/// `frame` with its value's keys sorted, so a call's result reads the same
/// as its replay from the kept `jsonb` (see [`crate::sorted`]).
fn sorted_frame(frame: Frame) -> Frame {
    match frame {
        Frame::Chunk { value } => Frame::Chunk {
            value: sorted_keys(value),
        },
        Frame::Final { value } => Frame::Final {
            value: sorted_keys(value),
        },
        other => other,
    }
}

/// Ends `attempt` as `result` says.
fn end_attempt(attempt: Attempt, result: &InvokeResult) {
    match (&result.output, &result.error) {
        (_, Some(error)) => {
            let kind = FailureKind::of_runner_error(&error.name);
            let message = format!("{}: {}", error.name, error.message);
            attempt.failed(&Failure::new(kind, message));
        }
        (Some(output), None) => attempt.succeeded(output),
        (None, None) => attempt.ended(
            AttemptStatus::RunnerLost,
            "the runner ended the call without a result",
        ),
    }
}

fn sse_events(call: Call) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(
        (call, None::<Value>),
        |(mut call, mut last_chunk)| async move {
            let frame = call.next().await?;
            let event = match frame {
                Frame::Log { level, message } => json_event("log", &LogLine { level, message }),
                Frame::Chunk { value } => {
                    let event = json_event("chunk", &value);
                    last_chunk = Some(value);
                    event
                }
                Frame::End => json_event(
                    "result",
                    &serde_json::json!({ "output": last_chunk.take() }),
                ),
                Frame::Final { value } => {
                    json_event("result", &serde_json::json!({ "output": value }))
                }
                Frame::Error { name, message } => json_event("error", &ToolError { name, message }),
                Frame::Launched => json_event(
                    "result",
                    &serde_json::json!({"output": {"status": "launched"}}),
                ),
            };
            Some((Ok(event), (call, last_chunk)))
        },
    )
}

fn json_event(name: &str, data: &impl Serialize) -> Event {
    Event::default()
        .event(name)
        .json_data(data)
        .unwrap_or_else(|_| Event::default().event(name).data("null"))
}
