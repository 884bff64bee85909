//! The tools of one turn, built from the agent config (seed steps 1–8):
//! unknown keys were already refused by the config parser; built-ins come
//! from a static match; `tool_*` keys load the account's uploaded tools and
//! expose their manifest names; `needsApproval` and `async` are recorded per
//! tool; each tool's effects are its own narrowed by the config's
//! `effects` (never widened); `async_status` is added when any enabled tool
//! is async; MCP servers add their tools (`remote`). The same build runs
//! when an agent is saved and before every turn; what a config being saved
//! is refused for, a stored one may only be warned about ([`ConfigSource`],
//! [`super::effects`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_bundles::BundleStore;
use toolserver_domain::agent::mcp::McpServerSetting;
use toolserver_domain::agent::ASYNC_STATUS_TOOL;
use toolserver_domain::{
    AccountId, AgentConfig, BuiltinTool, ToolEffects, ToolKey, ToolSetting, ValidationError,
};
use toolserver_sandbox::Executor;
use toolserver_store::{StoreError, ToolRecord};

mod remote;

use super::effects::{self, Conduct, ConfigSource, Declared};
use super::mcp::McpClients;
use super::stored;
use super::tavily::{Endpoint, TavilySettings, TavilyTool};
use super::{Breaker, Breakers, DetachedLimits, RegisteredTool, ToolImpl, ToolVersion};
use crate::config_cache::ConfigCache;
use crate::connections::{Connections, ACCOUNT_USER};
use crate::handoff::{self, HandoffOptions, HandoffTool, TurnScope};
use crate::outbound::OutboundPolicy;
use crate::policy::{CallGate, Verdict};
use crate::provider::ToolSpec;
use crate::runner_call::RunnerCallSettings;
use crate::sealing::SecretBox;

/// What building a registry needs.
#[derive(Clone)]
pub struct ToolSources {
    /// The database (uploaded tool manifests).
    pub pool: PgPool,
    /// Runs uploaded tools.
    pub executor: Arc<dyn Executor>,
    /// Holds bundles.
    pub bundles: Arc<dyn BundleStore>,
    /// How bundles travel to runners.
    pub runner: RunnerCallSettings,
    /// Tavily's address and fallback key.
    pub tavily: TavilySettings,
    /// Opens account secrets (HTTP tools) and signs fetch grants.
    pub sealer: SecretBox,
    /// The server's `POST /runner/fetch` as runners reach it: bundle
    /// tools' `ctx.fetch` (`None`: not offered).
    pub fetch_url: Option<url::Url>,
    /// Outbound HTTP client (SSRF-guarded).
    pub http: reqwest::Client,
    /// Outbound address policy.
    pub policy: OutboundPolicy,
    /// Deadline of a call whose config names none.
    pub default_tool_timeout: Duration,
    /// Agents' MCP servers.
    pub mcp: Arc<McpClients>,
    /// This process's circuit breakers, per account and tool.
    pub breakers: Arc<Breakers>,
}

impl ToolSources {
    /// The setting's default deadline of a call whose config names none.
    pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(25);

    /// Where end users' connections are kept and refreshed.
    pub fn connections(&self) -> Connections {
        Connections::new(
            self.pool.clone(),
            self.sealer.clone(),
            self.http.clone(),
            self.policy.clone(),
        )
    }
}

/// Why a registry could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The config names something unusable; the field says what.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The database failed.
    #[error(transparent)]
    Store(StoreError),
}

/// The tools of one turn, by model-facing name, with the policies that
/// judge their calls (none: every call runs as configured).
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, RegisteredTool>,
    /// MCP servers that act through end users' connections, listed per
    /// end user when the turn's user is known ([`Self::in_scope`]).
    user_servers: Vec<(String, McpServerSetting)>,
    handoff: Option<HandoffTool>,
    provider_tools: Vec<String>,
    has_async: bool,
    warnings: Vec<String>,
    gate: Option<CallGate>,
}

impl ToolRegistry {
    /// Builds the registry of `config` for `account`, its uploaded tools
    /// read through `cache`. `provider_supports` says whether the model's
    /// provider runs a provider-defined tool.
    pub async fn build(
        sources: &ToolSources,
        cache: &ConfigCache,
        account: &AccountId,
        config: &AgentConfig,
        provider_supports: &(dyn Fn(&str) -> bool + Sync),
        source: ConfigSource,
    ) -> Result<Self, RegistryError> {
        let mut registry = Self::default();
        for (key, setting) in &config.tools {
            if let ToolKey::Builtin(builtin) = key {
                if !setting.enabled {
                    // A built-in's effects are fixed, so a setting that
                    // would widen them is wrong even while it is off.
                    let field = format!("config.tools.{key}");
                    registry.settle_effects(&field, setting, builtin.effects(), source)?;
                }
                if !builtin.has_local_execute() && setting.run_async {
                    let warning = format!(
                        "config.tools.{key}.async is ignored: {key} is provider-defined and has no local execute"
                    );
                    tracing::warn!(%account, "{warning}");
                    registry.warnings.push(warning);
                }
            }
        }
        for (key, setting) in config.enabled_tools() {
            let field = format!("config.tools.{key}");
            let mut version = None;
            let (name, description, schema, implementation, declared): (
                String,
                String,
                Value,
                Arc<dyn ToolImpl>,
                Declared,
            ) = match key {
                ToolKey::Builtin(BuiltinTool::GoogleSearch) => {
                    if !provider_supports(BuiltinTool::GoogleSearch.name()) {
                        return Err(ValidationError::new(
                                field,
                                format!(
                                    "googleSearch is a provider-defined tool and the {} provider does not offer it",
                                    config.model.provider
                                ),
                            )
                            .into());
                    }
                    registry.settle_effects(
                        &field,
                        setting,
                        BuiltinTool::GoogleSearch.effects(),
                        source,
                    )?;
                    registry.provider_tools.push(key.to_string());
                    continue;
                }
                ToolKey::Builtin(BuiltinTool::Handoff) => {
                    let options = HandoffOptions::of(config).unwrap_or_default();
                    let tool = HandoffTool::new(sources.pool.clone(), options);
                    registry.handoff = Some(tool.clone());
                    (
                        BuiltinTool::Handoff.name().to_owned(),
                        handoff::DESCRIPTION.to_owned(),
                        handoff::input_schema(),
                        Arc::new(tool),
                        Declared::builtin(BuiltinTool::Handoff),
                    )
                }
                ToolKey::Builtin(builtin) => {
                    let endpoint = match builtin {
                        BuiltinTool::TavilyExtract => Endpoint::Extract,
                        _ => Endpoint::Search,
                    };
                    let tool = tavily_tool(sources, endpoint, setting, &field)?;
                    (
                        builtin.name().to_owned(),
                        endpoint.description().to_owned(),
                        endpoint.input_schema(),
                        Arc::new(tool),
                        Declared::builtin(builtin),
                    )
                }
                ToolKey::Uploaded(id) => {
                    let record = match cache.tool(&sources.pool, account, id).await {
                        Ok(record) => record,
                        Err(StoreError::NotFound) => {
                            return Err(ValidationError::new(
                                field,
                                "no uploaded tool with this id in your account",
                            )
                            .into())
                        }
                        Err(err) => return Err(RegistryError::Store(err)),
                    };
                    version = Some(ToolVersion::of(&record));
                    let declared = Declared::uploaded(&record);
                    let name = record.name.clone();
                    let description = record.description.clone();
                    let schema = record.input_schema.as_value().clone();
                    let record = ToolRecord::clone(&record);
                    let tool = stored::implementation(sources, account, &setting.options, record);
                    (name, description, schema, tool, declared)
                }
            };
            let tool_id = match key {
                ToolKey::Uploaded(id) => Some(id),
                ToolKey::Builtin(_) => None,
            };
            let effects = registry.settle_effects(&field, setting, declared.effects, source)?;
            let described = Described {
                name,
                tool_id,
                version,
                description,
                schema,
                implementation,
                conduct: declared.narrowed_to(effects),
            };
            registry.insert(sources, &field, setting, described)?;
        }
        let listings = join_all(config.mcp_servers.values().map(|server| async move {
            match server.connection() {
                Some(_) => None,
                None => Some(sources.mcp.list(account, server, None).await),
            }
        }))
        .await;
        for ((server_name, server), listing) in config.mcp_servers.iter().zip(listings) {
            registry
                .add_remote(sources, account, server_name, server, listing, source)
                .await?;
        }
        registry.guard_with(&sources.breakers, account);
        Ok(registry)
    }

    /// Gives every tool `account`'s breaker of it among `breakers`.
    fn guard_with(&mut self, breakers: &Arc<Breakers>, account: &AccountId) {
        for (name, tool) in &mut self.tools {
            tool.breaker = Some(Breaker::of(breakers, account, name));
        }
    }

    fn warn(&mut self, warning: String) {
        tracing::warn!("{warning}");
        self.warnings.push(warning);
    }

    /// [`effects::settle`], its warnings recorded.
    fn settle_effects(
        &mut self,
        field: &str,
        setting: &ToolSetting,
        declared: ToolEffects,
        source: ConfigSource,
    ) -> Result<ToolEffects, ValidationError> {
        let (effects, warnings) = effects::settle(field, setting, declared, source)?;
        for warning in warnings {
            self.warn(warning);
        }
        Ok(effects)
    }

    /// The tools an account serves over MCP: its uploaded tools `records`
    /// (each with its `defaultConfig`) and, with `builtins`, the built-ins
    /// this server runs on its own key (Tavily, when a fallback key is set).
    pub fn serving(
        sources: &ToolSources,
        account: &AccountId,
        records: Vec<ToolRecord>,
        builtins: bool,
    ) -> Result<Self, ValidationError> {
        let mut registry = Self::default();
        let setting = ToolSetting::default();
        if builtins && sources.tavily.fallback_api_key.is_some() {
            for endpoint in [Endpoint::Search, Endpoint::Extract] {
                let builtin = match endpoint {
                    Endpoint::Search => BuiltinTool::TavilySearch,
                    Endpoint::Extract => BuiltinTool::TavilyExtract,
                };
                let field = format!("tools.{}", builtin.name());
                let tool = tavily_tool(sources, endpoint, &setting, &field)?;
                let declared = Declared::builtin(builtin);
                let described = Described {
                    name: builtin.name().to_owned(),
                    tool_id: None,
                    version: None,
                    description: endpoint.description().to_owned(),
                    schema: endpoint.input_schema(),
                    implementation: Arc::new(tool),
                    conduct: declared.as_declared(),
                };
                registry.insert(sources, &field, &setting, described)?;
            }
        }
        for record in records {
            let field = format!("tools.{}", record.name);
            let declared = Declared::uploaded(&record);
            let described = Described {
                name: record.name.clone(),
                tool_id: Some(record.id),
                version: Some(ToolVersion::of(&record)),
                description: record.description.clone(),
                schema: record.input_schema.as_value().clone(),
                implementation: stored::implementation(sources, account, &setting.options, record),
                conduct: declared.as_declared(),
            };
            registry.insert(sources, &field, &setting, described)?;
        }
        registry.guard_with(&sources.breakers, account);
        Ok(registry)
    }

    /// Adds one tool under its name; a name taken already is refused.
    fn insert(
        &mut self,
        sources: &ToolSources,
        field: &str,
        setting: &ToolSetting,
        described: Described,
    ) -> Result<(), ValidationError> {
        let Described {
            name,
            tool_id,
            version,
            description,
            schema,
            implementation,
            conduct,
        } = described;
        if name == ASYNC_STATUS_TOOL || self.tools.contains_key(&name) {
            return Err(ValidationError::new(
                field,
                format!("the tool name {name:?} is already taken by another enabled tool"),
            ));
        }
        let validator = jsonschema::validator_for(&schema).map_err(|err| {
            ValidationError::new(
                field,
                format!("the tool's inputSchema does not compile: {err}"),
            )
        })?;
        self.has_async |= setting.run_async;
        let timeout = setting
            .timeout_ms
            .map_or(sources.default_tool_timeout, Duration::from_millis);
        self.tools.insert(
            name.clone(),
            RegisteredTool {
                name,
                tool_id,
                version,
                description,
                input_schema: schema,
                validator: Arc::new(validator),
                needs_approval: setting.needs_approval,
                run_async: setting.run_async,
                timeout,
                detached: DetachedLimits {
                    heartbeat_timeout: setting.heartbeat_timeout_secs.map(Duration::from_secs),
                    timeout: setting.detached_timeout_secs.map(Duration::from_secs),
                },
                effects: conduct.effects,
                retry: conduct.retry,
                open_world: conduct.open_world,
                breaker: None,
                hidden: false,
                implementation,
            },
        );
        Ok(())
    }

    /// The registry of a turn of `scope`'s conversation: tools that act on
    /// the conversation (`handoff`) act on this one (until then they fail),
    /// tools that act through a connection use the turn's end user's, and
    /// MCP servers that act through connections offer that user's tools.
    pub async fn in_scope(mut self, sources: &ToolSources, scope: TurnScope) -> Self {
        let user = scope.user.as_deref().unwrap_or(ACCOUNT_USER);
        for tool in self.tools.values_mut() {
            tool.act_for(user);
        }
        if !self.user_servers.is_empty() {
            self.list_for_user(sources, &scope.account, user).await;
            self.guard_with(&sources.breakers, &scope.account);
        }
        let name = BuiltinTool::Handoff.name();
        if let (Some(handoff), Some(tool)) = (&self.handoff, self.tools.get_mut(name)) {
            tool.implementation = Arc::new(handoff.in_scope(scope));
        }
        self
    }

    /// Every tool, by name.
    pub fn tools(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.values()
    }

    /// This registry with `gate` judging its calls.
    pub fn with_gate(mut self, gate: CallGate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// What the policies in force decide on calling `tool` with `input`;
    /// `None` when none are in force (the call runs as configured).
    pub fn verdict(&self, tool: &RegisteredTool, input: &Value) -> Option<Verdict> {
        let gate = self.gate.as_ref().filter(|gate| !gate.is_open())?;
        Some(gate.decide(&tool.name, tool.effects, input))
    }

    /// The tools offered to a model or a client: those the policies in
    /// force could let run for some input.
    pub fn offered(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools
            .values()
            .filter(|tool| !tool.hidden)
            .filter(|tool| match &self.gate {
                Some(gate) => gate.offers(&tool.name, tool.effects),
                None => true,
            })
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    /// Whether `async_status` is offered (some enabled tool is async).
    pub fn has_async(&self) -> bool {
        self.has_async
    }

    /// Warnings about ignored settings.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Provider-defined tools to enable.
    pub fn provider_tools(&self) -> &[String] {
        &self.provider_tools
    }

    /// The function specifications offered to the model (tools the
    /// policies deny whatever the input are left out).
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self
            .offered()
            .map(|tool| ToolSpec {
                name: tool.name.clone(),
                description: tool.description.clone(),
                parameters: tool.input_schema.clone(),
            })
            .collect();
        if self.has_async {
            specs.push(async_status_spec());
        }
        specs
    }
}

/// Whether `name` is a function name models take.
fn model_facing(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// A tool about to be registered.
struct Described {
    name: String,
    tool_id: Option<toolserver_domain::ToolId>,
    version: Option<ToolVersion>,
    description: String,
    schema: Value,
    implementation: Arc<dyn ToolImpl>,
    conduct: Conduct,
}

/// The model-facing contract of `async_status`.
pub(crate) fn async_status_spec() -> ToolSpec {
    ToolSpec {
        name: ASYNC_STATUS_TOOL.to_owned(),
        description: "Check on a tool call that runs in the background: its status, its logs, \
                      or stop it. Use the statusId from the call's pending result."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {
                "statusId": {"type": "string"},
                "action": {"type": "string", "enum": ["status", "logs", "stop"]},
            },
            "required": ["statusId", "action"],
            "additionalProperties": false,
        }),
    }
}

fn tavily_tool(
    sources: &ToolSources,
    endpoint: Endpoint,
    setting: &ToolSetting,
    field: &str,
) -> Result<TavilyTool, ValidationError> {
    let api_key = setting
        .options
        .get("apiKey")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            let fallback = sources.tavily.fallback_api_key.as_ref();
            fallback.map(|key| key.expose().to_owned())
        })
        .ok_or_else(|| {
            ValidationError::new(
                format!("{field}.apiKey"),
                "is required: this server has no fallback Tavily key",
            )
        })?;
    Ok(TavilyTool {
        endpoint,
        client: sources.http.clone(),
        base_url: sources.tavily.base_url.clone(),
        api_key,
        options: setting.options.clone(),
        policy: sources.policy.clone(),
    })
}
