//! The MCP server of one request's account: `tools/list` (without the
//! tools the account's policies deny whatever the input), `tools/call`
//! (put to the policies first: a denied call, or one they ask a person
//! about, is a tool error naming them; then inline, with each `yield` as
//! a progress notification; when the client
//! takes tasks and the tool can run detached, a call that does not end
//! within the inline window becomes a task), `tasks/get` and
//! `tasks/cancel`. A tool that fails is a tool error (`isError`); an
//! unknown tool, a bad cursor or an unknown task is a protocol error.

use std::borrow::Cow;

use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CreateTaskResult,
    ErrorCode, GetTaskParams, GetTaskResult, Implementation, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use toolserver_domain::{AccountId, AttemptStatus, CallPath, ResultId, ToolId};
use toolserver_harness::connections::ACCOUNT_USER;
use toolserver_harness::ledger::{CallPlace, CallScope, CalledTool};
use toolserver_harness::lifecycle::{TaskLaunch, TaskTerms};
use toolserver_harness::policy::{CallGate, Decision, Narrowing};
use toolserver_harness::tools::{RegisteredTool, ToolEvent, ToolRegistry};
use toolserver_store::{mcp_tasks, tools, StoreError};
use uuid::Uuid;

use super::auth::McpCaller;
use super::progress::Progress;
use super::wire;
use crate::admission::AdmissionError;
use crate::auth::EndUser;
use crate::state::AppState;

/// The revisions served: the current one and the one before it.
const REVISIONS: &[ProtocolVersion] =
    &[ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28];

/// Serves the account each request authenticated as.
#[derive(Clone)]
pub struct AccountServer {
    state: AppState,
}

impl AccountServer {
    /// A server over `state`.
    pub fn new(state: AppState) -> Self {
        Self { state }
    }

    /// The tool `name` of `account`: an uploaded tool, or a built-in this
    /// server runs; `None` when there is none.
    async fn find(
        &self,
        account: &AccountId,
        name: &str,
    ) -> Result<Option<RegisteredTool>, McpError> {
        let sources = self.state.harness().sources();
        let records = match tools::get_by_name(self.state.pool(), account, name).await {
            Ok(record) => vec![record],
            Err(StoreError::NotFound) => Vec::new(),
            Err(err) => return Err(store_error(err)),
        };
        let builtins = records.is_empty();
        let registry = ToolRegistry::serving(sources, account, records, builtins)
            .map_err(|err| McpError::internal_error(err.to_string(), None))?;
        Ok(registry.get(name).cloned())
    }

    /// The policies judging the calls of this request's end user.
    async fn gate(
        &self,
        account: &AccountId,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallGate, McpError> {
        let user = end_user(context);
        let narrowing = Narrowing {
            user: user.as_deref(),
            conversation: None,
        };
        let stack = self
            .state
            .harness()
            .policy_stack(account, None, narrowing)
            .await
            .map_err(store_error)?;
        Ok(CallGate::new(stack, user, CallPath::Mcp))
    }

    /// Puts a call of `tool` to the policies: why it may not run (they deny
    /// it, or ask a person, which an MCP call cannot wait for), recorded in
    /// the ledger as `denied`; `None` when it may.
    async fn judge(
        &self,
        account: &AccountId,
        tool: &RegisteredTool,
        input: &Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<String>, McpError> {
        let verdict = self
            .gate(account, context)
            .await?
            .decide(&tool.name, tool.effects, input);
        let refusal = match verdict.decision {
            Decision::Allow => return Ok(None),
            Decision::Ask => format!(
                "{}; an MCP call cannot wait for approval",
                verdict.explain(&tool.name)
            ),
            Decision::Deny => verdict.explain(&tool.name),
        };
        let call_id = uuid::Uuid::now_v7().to_string();
        let place = CallPlace::direct(call_id.clone(), call_id);
        let scope = CallScope {
            subject: end_user(context),
            ..CallScope::direct(account.clone(), CallPath::Mcp)
        };
        let tool_ref = CalledTool::from(tool);
        let status = AttemptStatus::Denied;
        let ledger = self.state.lifecycle().ledger();
        ledger.refused(&scope, &place, tool_ref, input, status, &refusal);
        Ok(Some(refusal))
    }

    /// Runs `tool` in this request, sending each snapshot it yields as a
    /// progress notification when the client asked for progress.
    async fn call_inline(
        &self,
        account: &AccountId,
        tool: &RegisteredTool,
        input: Value,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut progress = Progress::of(context);
        let call_id = uuid::Uuid::now_v7().to_string();
        let place = CallPlace::direct(call_id.clone(), call_id.clone());
        let scope = CallScope {
            subject: end_user(context),
            ..CallScope::direct(account.clone(), CallPath::Mcp)
        };
        let events = tool.call(call_id, place.idempotency_key.clone(), input.clone());
        let ledger = self.state.lifecycle().ledger();
        let mut events = ledger.recorded(&scope, &place, tool, &input, events);
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = context.ct.cancelled() => {
                    return wire::failure("the call was cancelled");
                }
            };
            match event {
                Some(ToolEvent::Snapshot(value)) => progress.send(&value).await,
                Some(ToolEvent::Output(value)) => return wire::output(value),
                Some(ToolEvent::Failed(error)) => return wire::failure(error.message),
                Some(ToolEvent::Launched) | None => {
                    return wire::failure("the tool ended without a result")
                }
                Some(ToolEvent::Log { .. }) => {}
            }
        }
    }

    /// Calls the uploaded `tool` for a client that takes tasks: the call
    /// answers inline when it ends within the inline window (with progress
    /// as [`Self::call_inline`]), and is the task otherwise.
    async fn call_as_task(
        &self,
        account: &AccountId,
        tool: &RegisteredTool,
        tool_id: ToolId,
        input: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let settings = &self.state.settings().mcp;
        let terms = TaskTerms {
            ttl: settings.task_ttl,
            poll_interval: settings.task_poll_interval,
            inline_window: settings.task_inline_window,
        };
        let lifecycle = self.state.lifecycle();
        let TaskLaunch { id, mut events } = lifecycle
            .launch_task(account, tool, tool_id, input, terms)
            .await
            .map_err(store_error)?;
        let mut progress = Progress::of(context);
        let answer = loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = context.ct.cancelled() => {
                    drop(events);
                    lifecycle.abandon_task(account, tool_id, id).await.map_err(store_error)?;
                    return Ok(wire::failure("the call was cancelled").into());
                }
            };
            match event {
                Some(ToolEvent::Snapshot(value)) => progress.send(&value).await,
                Some(ToolEvent::Log { .. }) => {}
                Some(ToolEvent::Output(value)) => break wire::output(value),
                Some(ToolEvent::Failed(error)) => break wire::failure(error.message),
                None => break wire::failure("the tool ended without a result"),
                Some(ToolEvent::Launched) => {
                    let record = lifecycle
                        .task_started(account, id)
                        .await
                        .map_err(task_error)?;
                    let task = wire::task(&record, settings.task_inline_window);
                    return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
                }
            }
        };
        lifecycle
            .answered_inline(account, id)
            .await
            .map_err(store_error)?;
        Ok(answer.into())
    }
}

impl ServerHandler for AccountServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tasks()
            .build();
        InitializeResult::new(capabilities)
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_server_info(Implementation::new("toolserver", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "The tools of your toolserver account. Uploaded tools run in your account's \
                 runners; a client that takes tasks gets a task for an uploaded tool call \
                 that does not end within a moment.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(REVISIONS)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let account = caller(&context)?;
        let cursor = request.and_then(|request| request.cursor);
        let after =
            match &cursor {
                None => None,
                Some(cursor) => Some(Uuid::try_parse(cursor).map(ToolId::from_uuid).map_err(
                    |_| McpError::invalid_params("the cursor is not one this server gave", None),
                )?),
            };
        let page_size = self.state.settings().mcp.page_size.max(1);
        let (records, more) = tools::list(self.state.pool(), &account, after, page_size)
            .await
            .map_err(store_error)?;
        let next = match more {
            true => records.last().map(|record| record.id.as_uuid().to_string()),
            false => None,
        };
        let sources = self.state.harness().sources();
        let gate = self.gate(&account, &context).await?;
        let registry = ToolRegistry::serving(sources, &account, records, cursor.is_none())
            .map_err(|err| McpError::internal_error(err.to_string(), None))?
            .with_gate(gate);
        let mut result =
            ListToolsResult::with_all_items(registry.offered().map(wire::tool).collect());
        result.next_cursor = next;
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let account = caller(&context)?;
        let Some(mut tool) = self.find(&account, &request.name).await? else {
            return Err(McpError::invalid_params(
                format!("unknown tool: {}", request.name),
                None,
            ));
        };
        tool.act_for(end_user(&context).as_deref().unwrap_or(ACCOUNT_USER));
        let input = Value::Object(request.arguments.unwrap_or_default());
        if let Err(problem) = tool.check_input(&input) {
            return Ok(wire::failure(problem).into());
        }
        if let Some(refusal) = self.judge(&account, &tool, &input, &context).await? {
            return Ok(wire::failure(refusal).into());
        }
        let takes_tasks = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        let admission = self.state.admission();
        match tool.tool_id {
            Some(tool_id) if takes_tasks && tool.detachable() => {
                admission.mcp_task(&account).await.map_err(refused)?;
                self.call_as_task(&account, &tool, tool_id, input, &context)
                    .await
            }
            _ => {
                let _permit = admission.call(&account).await.map_err(refused)?;
                Ok(self
                    .call_inline(&account, &tool, input, &context)
                    .await
                    .into())
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let account = caller(&context)?;
        let id = task_id(&request.task_id)?;
        let record = mcp_tasks::get(self.state.pool(), &account, id)
            .await
            .map_err(task_error)?;
        let inline_window = self.state.settings().mcp.task_inline_window;
        Ok(GetTaskResult::new(wire::detailed(&record, inline_window)))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let account = caller(&context)?;
        let id = task_id(&request.task_id)?;
        self.state
            .lifecycle()
            .cancel_task(&account, id)
            .await
            .map_err(task_error)?;
        Ok(())
    }
}

/// A refused call as MCP answers it: a JSON-RPC error in the server range
/// whose data names the limit, its value and when to retry.
fn refused(err: AdmissionError) -> McpError {
    match err {
        AdmissionError::Refused(refusal) => McpError::new(
            ErrorCode(LIMIT_EXCEEDED),
            refusal.to_string(),
            Some(serde_json::json!({
                "code": "limit_exceeded",
                "limit": refusal.kind.name(),
                "value": refusal.value,
                "retryAfterMs": u64::try_from(refusal.retry_after.as_millis()).unwrap_or(u64::MAX),
            })),
        ),
        AdmissionError::Store(err) => store_error(err),
    }
}

/// The JSON-RPC error code of a call refused by admission (the range
/// -32000..-32099 is the server's own).
pub const LIMIT_EXCEEDED: i32 = -32029;

/// The end user the request's token names, if any.
fn end_user(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<EndUser>())
        .and_then(|user| user.0.clone())
}

/// The account the request authenticated as.
fn caller(context: &RequestContext<RoleServer>) -> Result<AccountId, McpError> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<McpCaller>())
        .map(|caller| caller.0.clone())
        .ok_or_else(|| McpError::internal_error("the request carries no account", None))
}

fn task_id(raw: &str) -> Result<ResultId, McpError> {
    ResultId::parse(raw).map_err(|_| not_found())
}

fn not_found() -> McpError {
    McpError::invalid_params("no such task", None)
}

fn task_error(err: StoreError) -> McpError {
    match err {
        StoreError::NotFound => not_found(),
        other => store_error(other),
    }
}

fn store_error(err: StoreError) -> McpError {
    tracing::warn!(error = %err, "an MCP request could not reach the database");
    McpError::internal_error("the server could not reach its database; try again", None)
}
