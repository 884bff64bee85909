//! The harness as the API uses it: agent config checks (at save and before
//! every run), credentials sealing, and model providers per agent.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use toolserver_domain::{
    AccountId, AgentConfig, AgentId, AgentLimits, Secret, Secrets, ValidationError,
};
use toolserver_store::{DedicatedSettings, StoreError};
use url::Url;

use crate::config_cache::ConfigCache;
use crate::handoff::HandoffOptions;
use crate::ledger::LedgerSettings;
use crate::lifecycle::LifecycleSettings;
use crate::outbound;
use crate::policy::{self, PolicyCache, PolicyStack};
use crate::provider::anthropic::AnthropicProvider;
use crate::provider::google::GoogleProvider;
use crate::provider::openai::OpenAiProvider;
use crate::provider::{ModelProvider, ProviderHttp};
use crate::sealing::{SealError, SecretBox};
use crate::stream::StreamSettings;
use crate::tools::{ConfigSource, RegistryError, ToolRegistry, ToolSources};
use crate::webhooks::WebhookSettings;

/// Why a stored agent could not be made ready to run.
#[derive(Debug, thiserror::Error)]
pub enum AgentLoadError {
    /// No such agent in the account (or it was deleted).
    #[error("agent not found")]
    NotFound,
    /// Its sealed credentials could not be opened.
    #[error("the agent's credentials could not be read: {0}")]
    Unseal(String),
    /// Its config is no longer valid (e.g. a tool was deleted).
    #[error(transparent)]
    Registry(RegistryError),
    /// Storage failed.
    #[error(transparent)]
    Store(StoreError),
}

/// Knobs of agent turns; each one is a server setting.
#[derive(Debug, Clone)]
pub struct HarnessSettings {
    /// Bounds on agent configs.
    pub agent_limits: AgentLimits,
    /// Each provider's endpoint and key when an agent names none.
    pub providers: ProviderDefaults,
    /// Longest wait a model provider's `Retry-After` may ask for before a
    /// pass is retried.
    pub model_max_retry_wait: Duration,
    /// Most tool calls of one model pass running at once.
    pub max_parallel_tool_calls: usize,
    /// Most messages in a conversation.
    pub max_conversation_messages: usize,
    /// Largest conversation, in bytes of JSON.
    pub max_conversation_bytes: usize,
    /// Most bytes of conversation messages a process keeps between turns.
    pub conversation_cache_bytes: usize,
    /// The connections a process keeps outside its pool for every turn's
    /// first and last writes.
    pub turn_connections: DedicatedSettings,
    /// Longest a turn may run.
    pub max_turn_duration: Duration,
    /// How long a turn's hold on its conversation lasts without renewal; a
    /// running turn renews it at a third of this, so a turn of a crashed
    /// server frees its conversation after at most this long.
    pub turn_lease: Duration,
    /// Interval of keep-alive comments on an idle stream.
    pub keep_alive: Duration,
    /// The server's public URL: runners post detached results under it.
    pub public_url: Url,
    /// How long a detached call may stay pending before it expires.
    pub async_result_ttl: Duration,
    /// Knobs of the detached lifecycle.
    pub lifecycle: LifecycleSettings,
    /// Knobs of turn streams (recording, resume, stop).
    pub streams: StreamSettings,
    /// Longest wait for a name lookup when a config naming an endpoint is
    /// saved; a name that has not answered by then passes (requests are
    /// judged again when they connect).
    pub outbound_resolve_timeout: Duration,
    /// How webhook posts (handoff announcements) are delivered.
    pub webhooks: WebhookSettings,
    /// How the tool-call ledger keeps its rows.
    pub ledger: LedgerSettings,
    /// Most entries of each kind (agents, uploaded tools, accounts'
    /// policies, accounts' scoped policies) kept read for turns (0: every
    /// turn reads them); see [`ConfigCache`].
    pub config_cache_entries: usize,
}

/// A provider's endpoint and key, used when an agent's config names none.
#[derive(Debug, Clone)]
pub struct ProviderDefault {
    /// The API's base URL.
    pub base_url: Url,
    /// The service-wide key, if any.
    pub api_key: Option<Secret>,
}

/// The fallback endpoint and key of each model provider.
#[derive(Debug, Clone)]
pub struct ProviderDefaults {
    /// OpenAI Chat Completions (and compatible servers).
    pub openai: ProviderDefault,
    /// Anthropic Messages.
    pub anthropic: ProviderDefault,
    /// Google Gemini.
    pub google: ProviderDefault,
}

impl ProviderDefaults {
    /// The public endpoints, with no keys.
    #[allow(clippy::expect_used)]
    fn public() -> Self {
        let endpoint = |url: &str| ProviderDefault {
            base_url: Url::parse(url).expect("a constant URL"),
            api_key: None,
        };
        Self {
            openai: endpoint(HarnessSettings::DEFAULT_OPENAI_BASE_URL),
            anthropic: endpoint(AnthropicProvider::DEFAULT_BASE_URL),
            google: endpoint(GoogleProvider::DEFAULT_BASE_URL),
        }
    }

    /// The fallback of the provider named `name`.
    fn of(&self, name: &str) -> Option<&ProviderDefault> {
        match name {
            "openai" => Some(&self.openai),
            "anthropic" => Some(&self.anthropic),
            "google" => Some(&self.google),
            _ => None,
        }
    }
}

impl HarnessSettings {
    /// The setting's default endpoint of the `openai` provider.
    pub const DEFAULT_OPENAI_BASE_URL: &'static str = "https://api.openai.com/v1";
    /// The setting's default of [`Self::max_parallel_tool_calls`].
    pub const DEFAULT_MAX_PARALLEL_TOOL_CALLS: usize = 8;
    /// The setting's default of [`Self::max_conversation_messages`].
    pub const DEFAULT_MAX_CONVERSATION_MESSAGES: usize = 1_000;
    /// The setting's default of [`Self::max_conversation_bytes`].
    pub const DEFAULT_MAX_CONVERSATION_BYTES: usize = 4 * 1024 * 1024;
    /// The setting's default of [`Self::conversation_cache_bytes`].
    pub const DEFAULT_CONVERSATION_CACHE_BYTES: usize = 256 * 1024 * 1024;
    /// The setting's default of [`Self::max_turn_duration`].
    pub const DEFAULT_MAX_TURN_DURATION: Duration = Duration::from_secs(900);
    /// The setting's default of [`Self::turn_lease`].
    pub const DEFAULT_TURN_LEASE: Duration = Duration::from_secs(30);
    /// The setting's default of [`Self::keep_alive`].
    pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);
    /// The setting's default of [`Self::async_result_ttl`].
    pub const DEFAULT_ASYNC_RESULT_TTL: Duration = Duration::from_secs(3600);
    /// The setting's default time to connect to a model provider or a tool
    /// API.
    pub const DEFAULT_OUTBOUND_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    /// The setting's default of [`Self::outbound_resolve_timeout`].
    pub const DEFAULT_OUTBOUND_RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
    /// The setting's default of [`Self::config_cache_entries`].
    pub const DEFAULT_CONFIG_CACHE_ENTRIES: usize = 10_000;
}

impl Default for HarnessSettings {
    /// The settings' defaults; the public URL is the default listener's.
    #[allow(clippy::expect_used)]
    fn default() -> Self {
        Self {
            agent_limits: AgentLimits::DEFAULT,
            providers: ProviderDefaults::public(),
            model_max_retry_wait: ProviderHttp::DEFAULT_MAX_RETRY_WAIT,
            max_parallel_tool_calls: Self::DEFAULT_MAX_PARALLEL_TOOL_CALLS,
            max_conversation_messages: Self::DEFAULT_MAX_CONVERSATION_MESSAGES,
            max_conversation_bytes: Self::DEFAULT_MAX_CONVERSATION_BYTES,
            conversation_cache_bytes: Self::DEFAULT_CONVERSATION_CACHE_BYTES,
            turn_connections: DedicatedSettings::DEFAULT,
            max_turn_duration: Self::DEFAULT_MAX_TURN_DURATION,
            turn_lease: Self::DEFAULT_TURN_LEASE,
            keep_alive: Self::DEFAULT_KEEP_ALIVE,
            public_url: Url::parse("http://127.0.0.1:8080/").expect("a constant URL"),
            async_result_ttl: Self::DEFAULT_ASYNC_RESULT_TTL,
            lifecycle: LifecycleSettings::DEFAULT,
            streams: StreamSettings::DEFAULT,
            outbound_resolve_timeout: Self::DEFAULT_OUTBOUND_RESOLVE_TIMEOUT,
            webhooks: WebhookSettings::DEFAULT,
            ledger: LedgerSettings::DEFAULT,
            config_cache_entries: Self::DEFAULT_CONFIG_CACHE_ENTRIES,
        }
    }
}

/// Checks agents and prepares what their turns run with.
pub struct Harness {
    sources: ToolSources,
    settings: HarnessSettings,
    policies: PolicyCache,
    stored: Arc<ConfigCache>,
}

/// A config that passed every check, and the tools it enables.
pub struct CheckedAgent {
    /// The parsed config (credentials in place).
    pub config: AgentConfig,
    /// The turn's tools.
    pub registry: ToolRegistry,
}

impl Harness {
    /// Bundles the harness's parts.
    pub fn new(sources: ToolSources, settings: HarnessSettings) -> Self {
        let stored = Arc::new(ConfigCache::new(settings.config_cache_entries));
        Self {
            sources,
            settings,
            policies: PolicyCache::default(),
            stored,
        }
    }

    /// The policies a call of `account` is judged by: the account's, then
    /// `config`'s agent's, if any, then those of the end user and the
    /// conversation `narrowing` names.
    pub async fn policy_stack(
        &self,
        account: &AccountId,
        config: Option<&AgentConfig>,
        narrowing: policy::Narrowing<'_>,
    ) -> Result<PolicyStack, StoreError> {
        let agent = config.and_then(|config| config.policies.as_deref());
        policy::stack_of(
            &self.policies,
            &self.stored,
            &self.sources.pool,
            account,
            agent,
            narrowing,
        )
        .await
    }

    /// What turns read from Postgres before they run, kept while current:
    /// a change made through this process is dropped from it before the
    /// change is answered.
    pub fn config_cache(&self) -> &Arc<ConfigCache> {
        &self.stored
    }

    /// Where tools come from and how they run.
    pub fn sources(&self) -> &ToolSources {
        &self.sources
    }

    /// The settings.
    pub fn settings(&self) -> &HarnessSettings {
        &self.settings
    }

    /// Seals and opens agent credentials and account secrets.
    pub fn sealer(&self) -> &SecretBox {
        &self.sources.sealer
    }

    /// Parses `config` (credentials in place) and builds its tool registry:
    /// unknown or missing tools, name clashes, unusable options and effects
    /// that widen a tool's own fail here; `source` says whether the config
    /// is being saved or was stored before (see [`ConfigSource`]).
    pub async fn check(
        &self,
        account: &AccountId,
        config: &Value,
        source: ConfigSource,
    ) -> Result<CheckedAgent, RegistryError> {
        let config = AgentConfig::parse(config, &self.settings.agent_limits)?;
        let provider = config.model.provider.clone();
        let supports = move |tool: &str| provider_supports(&provider, tool);
        let registry = ToolRegistry::build(
            &self.sources,
            &self.stored,
            account,
            &config,
            &supports,
            source,
        )
        .await?;
        Ok(CheckedAgent { config, registry })
    }

    /// Reads `agent` of `account` and checks it again before it runs (its
    /// tools may have changed since it was saved).
    pub async fn load_agent(
        &self,
        pool: &PgPool,
        account: &AccountId,
        agent: AgentId,
    ) -> Result<CheckedAgent, AgentLoadError> {
        let config = self.stored_config(pool, account, agent).await?;
        self.check(account, &config, ConfigSource::Stored)
            .await
            .map_err(AgentLoadError::Registry)
    }

    /// The stored config of `agent` of `account`, its credentials restored
    /// (not checked).
    pub async fn stored_config(
        &self,
        pool: &PgPool,
        account: &AccountId,
        agent: AgentId,
    ) -> Result<Value, AgentLoadError> {
        let record = self
            .stored
            .agent(pool, account, agent)
            .await
            .map_err(|err| match err {
                StoreError::NotFound => AgentLoadError::NotFound,
                other => AgentLoadError::Store(other),
            })?;
        self.unseal(
            &record.config,
            record.sealed_secrets.as_deref(),
            account,
            agent,
        )
        .map_err(|err| AgentLoadError::Unseal(err.to_string()))
    }

    /// [`Self::check`] for a config about to be saved: also refuses an
    /// endpoint that is, or now resolves to, an address the outbound policy
    /// does not allow (each request is judged again when it is made). The
    /// endpoints are resolved at once, so a save waits for one resolver
    /// timeout at most however many names do not answer; the first refused
    /// endpoint in the config's order is the one named.
    pub async fn check_for_save(
        &self,
        account: &AccountId,
        config: &Value,
    ) -> Result<CheckedAgent, RegistryError> {
        let checked = self.check(account, config, ConfigSource::Saving).await?;
        if let Some(text) = &checked.config.policies {
            policy::check_layer(&self.sources.pool, account, text)
                .await
                .map_err(|err| match err {
                    policy::CheckError::Refused(refused) => RegistryError::Invalid(
                        ValidationError::new("config.policies", refused.to_string()),
                    ),
                    policy::CheckError::Store(store) => RegistryError::Store(store),
                })?;
        }
        let providers = checked
            .config
            .providers
            .iter()
            .filter_map(|(name, credentials)| {
                let url = credentials.base_url.as_ref()?;
                Some((format!("config.provider.{name}.baseUrl"), url))
            });
        let servers = checked
            .config
            .mcp_servers
            .iter()
            .map(|(name, server)| (format!("config.mcpServers.{name}.url"), &server.url));
        let handoff = HandoffOptions::of(&checked.config).and_then(|options| options.webhook_url);
        let webhooks = handoff
            .iter()
            .map(|url| ("config.tools.handoff.webhookUrl".to_owned(), url));
        let channels = checked
            .config
            .channels
            .iter()
            .filter_map(|(name, channel)| {
                let (field, url) = channel.configured_url()?;
                Some((format!("config.channels.{name}.{field}"), url))
            });
        let endpoints: Vec<(String, &Url)> = providers
            .chain(servers)
            .chain(webhooks)
            .chain(channels)
            .collect();
        let verdicts = futures::future::join_all(endpoints.iter().map(|(_, url)| {
            outbound::check_destination(
                url,
                &self.sources.policy,
                self.settings.outbound_resolve_timeout,
            )
        }))
        .await;
        for ((field, _), verdict) in endpoints.iter().zip(verdicts) {
            verdict.map_err(|reason| ValidationError::new(field.clone(), reason))?;
        }
        Ok(checked)
    }

    /// Restores sealed credentials into a stored (redacted) config.
    pub fn unseal(
        &self,
        stored: &Value,
        sealed: Option<&[u8]>,
        account: &AccountId,
        agent: AgentId,
    ) -> Result<Value, SealError> {
        let secrets: Secrets = self.sources.sealer.open(sealed, account, agent)?;
        let mut config = stored.clone();
        secrets.restore(&mut config);
        Ok(config)
    }

    /// The model provider of an agent.
    pub fn provider(
        &self,
        config: &AgentConfig,
    ) -> Result<Arc<dyn ModelProvider>, ValidationError> {
        let provider = config.model.provider.as_str();
        let fallback = self.settings.providers.of(provider).ok_or_else(|| {
            ValidationError::new(
                "config.model.provider",
                format!("no adapter for provider {provider:?}"),
            )
        })?;
        let credentials = config.model_credentials();
        let base_url = credentials
            .base_url
            .unwrap_or_else(|| fallback.base_url.clone());
        let api_key = credentials
            .api_key
            .or_else(|| Some(fallback.api_key.as_ref()?.expose().to_owned()));
        let http = ProviderHttp {
            client: self.sources.http.clone(),
            policy: self.sources.policy.clone(),
            max_retry_wait: self.settings.model_max_retry_wait,
        };
        Ok(match provider {
            "anthropic" => Arc::new(AnthropicProvider::new(http, base_url, api_key)),
            "google" => Arc::new(GoogleProvider::new(http, base_url, api_key)),
            _ => Arc::new(OpenAiProvider::new(http, base_url, api_key)),
        })
    }
}

/// Provider-defined tools each provider runs itself, as (provider, tool):
/// Gemini's Google Search grounding. The Chat Completions and Messages
/// adapters offer none.
const PROVIDER_DEFINED_TOOLS: &[(&str, &str)] = &[("google", "googleSearch")];

/// Whether `provider` runs the provider-defined tool `tool` itself.
pub fn provider_supports(provider: &str, tool: &str) -> bool {
    PROVIDER_DEFINED_TOOLS
        .iter()
        .any(|&(p, t)| p == provider && t == tool)
}
