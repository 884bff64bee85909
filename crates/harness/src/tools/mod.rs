//! Tools as the agent loop sees them: a name, a description, an input schema
//! and a way to run that yields events (logs, preliminary snapshots, then an
//! output or a failure).

mod breaker;
mod effects;
mod failure;
mod http;
mod mcp;
mod registry;
mod stored;
mod tavily;
mod uploaded;

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use serde_json::Value;
use toolserver_domain::{RetryPolicy, ToolEffects};

pub use breaker::{Breaker, BreakerSettings, Breakers};
pub use effects::ConfigSource;
pub use failure::{Failure, FailureKind};
pub use http::{
    proxy, FetchingTool, HttpToolContext, ProxyError, ProxyRequest, ProxyResponse, Redactor,
};
pub use mcp::{ListTimings, McpClients};
pub use registry::{RegistryError, ToolRegistry, ToolSources};
pub use stored::{fetch_minter, http_context, server_call};
pub use tavily::TavilySettings;

use crate::metrics::CallMeter;

/// The built-ins this server runs itself, each with its input schema:
/// policies name them like uploaded tools.
pub fn builtin_inputs() -> Vec<(&'static str, Value)> {
    use toolserver_domain::BuiltinTool;
    vec![
        (
            BuiltinTool::TavilySearch.name(),
            tavily::Endpoint::Search.input_schema(),
        ),
        (
            BuiltinTool::TavilyExtract.name(),
            tavily::Endpoint::Extract.input_schema(),
        ),
        (BuiltinTool::Handoff.name(), crate::handoff::input_schema()),
    ]
}

/// Something a running tool reports.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolEvent {
    /// A console line.
    Log {
        /// `log`, `info`, `warn`, `error` or `debug`.
        level: String,
        /// The text.
        message: String,
    },
    /// A preliminary snapshot of a streaming tool's output.
    Snapshot(Value),
    /// The final output; the last event.
    Output(Value),
    /// The call failed; the last event.
    Failed(Failure),
    /// A detached call is running on its runner; the last event of a launch.
    Launched,
}

/// The events of one call, ending with `Output` or `Failed`.
pub type ToolEvents = BoxStream<'static, ToolEvent>;

/// One call to run.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The model's call id.
    pub tool_call_id: String,
    /// The call's idempotency key (`ctx.idempotencyKey` for uploaded tools).
    pub idempotency_key: String,
    /// The validated input.
    pub input: Value,
    /// Deadline of the call.
    pub timeout: Duration,
}

/// A tool implementation.
pub trait ToolImpl: Send + Sync {
    /// The events of a call; nothing runs until the stream is polled, and
    /// dropping the stream cancels the call.
    fn call(&self, invocation: Invocation) -> ToolEvents;

    /// Whether the tool can run detached (on a runner that reports back).
    fn detachable(&self) -> bool {
        false
    }

    /// A detached call: the runner starts it in the background and posts its
    /// outcome to the completion route described by `async_meta`; the events
    /// end once it is launched. `None` for tools that run in the server.
    fn call_detached(&self, invocation: Invocation, async_meta: Value) -> Option<ToolEvents> {
        let _ = (invocation, async_meta);
        None
    }

    /// The OAuth provider whose end-user connection calls act through.
    fn connection(&self) -> Option<&str> {
        None
    }

    /// This tool acting for end user `user` (`""`: the account), when its
    /// calls depend on who they act for; `None` otherwise.
    fn for_user(&self, user: &str) -> Option<Arc<dyn ToolImpl>> {
        let _ = user;
        None
    }
}

/// Bounds of a tool's detached calls, from its agent config. Whether a
/// call whose runner died is launched again follows the tool's effects
/// ([`RegisteredTool::effects`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DetachedLimits {
    /// A call expires when no heartbeat arrives for this long.
    pub heartbeat_timeout: Option<Duration>,
    /// A call expires this long after launch (default: the server's TTL).
    pub timeout: Option<Duration>,
}

/// The version of an account's tool a call runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolVersion {
    /// The tool's version number.
    pub number: i32,
    /// Its bundle's SHA-256 (hex); `None` for an HTTP tool.
    pub bundle_sha256: Option<String>,
}

impl ToolVersion {
    /// The version `record` is at.
    pub fn of(record: &toolserver_store::ToolRecord) -> Self {
        Self {
            number: record.version,
            bundle_sha256: record.body.bundle_sha256().map(|sha| sha.to_hex()),
        }
    }
}

/// A tool offered to the model this turn.
#[derive(Clone)]
pub struct RegisteredTool {
    /// Model-facing name.
    pub name: String,
    /// The uploaded tool behind it, if any.
    pub tool_id: Option<toolserver_domain::ToolId>,
    /// The uploaded tool's version, if it is one.
    pub version: Option<ToolVersion>,
    /// Model-facing description.
    pub description: String,
    /// JSON Schema of the input.
    pub input_schema: Value,
    /// The compiled schema.
    validator: Arc<jsonschema::Validator>,
    /// Calls wait for a person's approval.
    pub needs_approval: bool,
    /// Calls return a pending result at once and deliver the output later.
    pub run_async: bool,
    /// Deadline of each call.
    pub timeout: Duration,
    /// Bounds of this tool's detached calls.
    pub detached: DetachedLimits,
    /// What a call does to the world, as the tool declares it (an uploaded
    /// tool's manifest, a built-in's fixed effects, a remote MCP tool's
    /// annotations), narrowed by the agent config's `effects`. Only `read`
    /// and `idempotent` calls may run again: a detached call whose runner
    /// died is launched again iff [`ToolEffects::allows_repeat`].
    pub effects: ToolEffects,
    /// How a call that failed for a transient reason may be tried again:
    /// the manifest's `retry` (defaults for everything else), with one
    /// attempt whenever [`Self::effects`] is `side_effect`.
    pub retry: RetryPolicy,
    /// Whether the tool reaches beyond this server (the network, people):
    /// MCP's `openWorldHint`.
    pub open_world: bool,
    /// The account's breaker of this tool, once the registry has one.
    pub breaker: Option<Breaker>,
    /// Not offered, though calls made of it still run (an MCP server's
    /// connect tool once its end user is connected).
    hidden: bool,
    implementation: Arc<dyn ToolImpl>,
}

impl RegisteredTool {
    /// Validates `input` against the tool's schema, naming every violation.
    pub fn check_input(&self, input: &Value) -> Result<(), String> {
        toolserver_domain::tool::violations(&self.validator, input).map_err(|errors| {
            format!(
                "input does not match the tool's inputSchema: {}",
                errors.join("; ")
            )
        })
    }

    /// The OAuth provider whose end-user connection calls act through.
    pub fn connection(&self) -> Option<&str> {
        self.implementation.connection()
    }

    /// This tool acting for end user `user` (`""`: the account): the
    /// connection its calls act through is that user's.
    pub fn act_for(&mut self, user: &str) {
        if let Some(bound) = self.implementation.for_user(user) {
            self.implementation = bound;
        }
    }

    /// Whether calls can be detached (uploaded tools).
    pub fn detachable(&self) -> bool {
        self.implementation.detachable()
    }

    /// Launches a detached call (uploaded tools only).
    pub fn call_detached(
        &self,
        tool_call_id: String,
        input: Value,
        async_meta: Value,
    ) -> Option<ToolEvents> {
        let idempotency_key = async_meta["idempotencyKey"]
            .as_str()
            .map_or_else(|| tool_call_id.clone(), str::to_owned);
        let invocation = Invocation {
            tool_call_id,
            idempotency_key,
            input,
            timeout: self.timeout,
        };
        self.implementation
            .call_detached(invocation, async_meta)
            .map(|events| self.metered(with_deadline(events, self.timeout), "detached"))
    }

    /// Starts a call under `idempotency_key`, failing it when it outlives
    /// its deadline; refused at once while the tool's breaker is open.
    pub fn call(&self, tool_call_id: String, idempotency_key: String, input: Value) -> ToolEvents {
        let invocation = Invocation {
            tool_call_id,
            idempotency_key,
            input,
            timeout: self.timeout,
        };
        let start = || {
            self.metered(
                with_deadline(self.implementation.call(invocation), self.timeout),
                "inline",
            )
        };
        match &self.breaker {
            Some(breaker) => breaker.guard(start),
            None => start(),
        }
    }

    /// `events`, counted and timed by their outcome (see [`crate::metrics`]).
    fn metered(&self, events: ToolEvents, mode: &'static str) -> ToolEvents {
        use futures::StreamExt;
        let kind = match self.tool_id {
            Some(_) => "uploaded",
            None => "builtin",
        };
        let mut meter = CallMeter::start(kind, mode);
        events
            .map(move |event| {
                match &event {
                    ToolEvent::Output(_) => meter.finish("ok"),
                    ToolEvent::Failed(_) => meter.finish("error"),
                    ToolEvent::Launched => meter.finish("launched"),
                    ToolEvent::Log { .. } | ToolEvent::Snapshot(_) => {}
                }
                event
            })
            .boxed()
    }
}

/// Ends `events` with its first final event, or with a failure if none
/// arrives within `timeout` (plus a grace second, so a runner's own deadline
/// error wins) or the events stop without one.
fn with_deadline(events: ToolEvents, timeout: Duration) -> ToolEvents {
    use futures::StreamExt;
    let deadline = Box::pin(tokio::time::sleep(timeout + Duration::from_secs(1)));
    futures::stream::unfold(Some((events, deadline)), move |state| async move {
        let (mut events, mut deadline) = state?;
        tokio::select! {
            event = events.next() => match event {
                Some(event @ (ToolEvent::Output(_) | ToolEvent::Failed(_))) => Some((event, None)),
                Some(event) => Some((event, Some((events, deadline)))),
                None => {
                    let failure = Failure::new(FailureKind::RunnerLost, "the tool ended without a result");
                    Some((ToolEvent::Failed(failure), None))
                }
            },
            () = &mut deadline => {
                let message = format!("the tool did not finish within {} ms", timeout.as_millis());
                Some((ToolEvent::Failed(Failure::new(FailureKind::Timeout, message)), None))
            }
        }
    })
    .boxed()
}
