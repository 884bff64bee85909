//! Agents: model providers, built-in tools, outbound requests, and the
//! bounds on agent configs, conversations and turns.

use clap::Args;
use toolserver_domain::{AgentLimits, Secret};
use toolserver_harness::provider::anthropic::AnthropicProvider;
use toolserver_harness::provider::google::GoogleProvider;
use toolserver_harness::provider::ProviderHttp;
use toolserver_harness::HarnessSettings;
use url::Url;

use super::parse::{hex_key, secret, within};
use super::units::{millis, secs};

/// Agents, model providers, built-in tools and turn limits.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Agents")]
pub struct AgentsConfig {
    /// Key sealing credentials in agent configs; every server of one
    /// database must share it. Unset: a key generated into
    /// `<data dir>/secrets.key`.
    #[arg(
        long,
        env = "TOOLSERVER_SECRETS_KEY",
        hide_env_values = true,
        value_parser = hex_key(32)
    )]
    pub secrets_key: Option<Secret>,
    /// Endpoint of the `openai` provider when an agent names none.
    #[arg(
        long,
        env = "TOOLSERVER_OPENAI_BASE_URL",
        default_value = HarnessSettings::DEFAULT_OPENAI_BASE_URL
    )]
    pub openai_base_url: Url,
    /// Fallback key of the `openai` provider.
    #[arg(
        long,
        env = "TOOLSERVER_OPENAI_API_KEY",
        hide_env_values = true,
        value_parser = secret(1)
    )]
    pub openai_api_key: Option<Secret>,
    /// Endpoint of the `anthropic` provider when an agent names none.
    #[arg(
        long,
        env = "TOOLSERVER_ANTHROPIC_BASE_URL",
        default_value = AnthropicProvider::DEFAULT_BASE_URL
    )]
    pub anthropic_base_url: Url,
    /// Fallback key of the `anthropic` provider.
    #[arg(
        long,
        env = "TOOLSERVER_ANTHROPIC_API_KEY",
        hide_env_values = true,
        value_parser = secret(1)
    )]
    pub anthropic_api_key: Option<Secret>,
    /// Endpoint of the `google` (Gemini) provider when an agent names none.
    #[arg(
        long,
        env = "TOOLSERVER_GOOGLE_BASE_URL",
        default_value = GoogleProvider::DEFAULT_BASE_URL
    )]
    pub google_base_url: Url,
    /// Fallback key of the `google` (Gemini) provider.
    #[arg(
        long,
        env = "TOOLSERVER_GOOGLE_API_KEY",
        hide_env_values = true,
        value_parser = secret(1)
    )]
    pub google_api_key: Option<Secret>,
    /// Longest wait, in milliseconds, a model provider's `Retry-After` may
    /// ask for before the pass is retried (twice at most); a longer one
    /// fails the pass with the provider's answer.
    #[arg(
        long,
        env = "TOOLSERVER_MODEL_MAX_RETRY_WAIT_MS",
        default_value_t = millis(ProviderHttp::DEFAULT_MAX_RETRY_WAIT)
    )]
    pub model_max_retry_wait_ms: u64,
    /// Tavily's API base.
    #[arg(
        long,
        env = "TOOLSERVER_TAVILY_BASE_URL",
        default_value = "https://api.tavily.com"
    )]
    pub tavily_base_url: Url,
    /// Service-wide fallback Tavily key.
    #[arg(
        long,
        env = "TOOLSERVER_TAVILY_API_KEY",
        hide_env_values = true,
        value_parser = secret(1)
    )]
    pub tavily_api_key: Option<Secret>,
    /// Let model and tool requests reach loopback and private addresses;
    /// for local models and tests only.
    #[arg(
        long,
        env = "TOOLSERVER_OUTBOUND_ALLOW_PRIVATE",
        default_value_t = false
    )]
    pub outbound_allow_private: bool,
    /// Milliseconds to connect to a model provider or tool API.
    #[arg(
        long,
        env = "TOOLSERVER_OUTBOUND_CONNECT_TIMEOUT_MS",
        default_value_t = millis(HarnessSettings::DEFAULT_OUTBOUND_CONNECT_TIMEOUT)
    )]
    pub outbound_connect_timeout_ms: u64,
    /// Milliseconds to wait for a host name's addresses when an agent naming
    /// it is saved; a name that has not answered by then is accepted and
    /// judged again when a request connects.
    #[arg(
        long,
        env = "TOOLSERVER_OUTBOUND_SAVE_RESOLVE_MS",
        default_value_t = millis(HarnessSettings::DEFAULT_OUTBOUND_RESOLVE_TIMEOUT)
    )]
    pub outbound_save_resolve_ms: u64,
    /// Model passes per turn when an agent sets no `maxSteps`.
    #[arg(
        long,
        env = "TOOLSERVER_DEFAULT_STEPS",
        default_value_t = AgentLimits::DEFAULT.default_steps
    )]
    pub default_steps: u32,
    /// Largest `maxSteps` an agent may set.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_STEPS",
        default_value_t = AgentLimits::DEFAULT.max_steps
    )]
    pub max_steps: u32,
    /// Longest system prompt, in characters.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_SYSTEM_PROMPT_CHARS",
        default_value_t = AgentLimits::DEFAULT.max_system_prompt_chars
    )]
    pub max_system_prompt_chars: usize,
    /// Largest agent config, in bytes of compact JSON.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_AGENT_CONFIG_BYTES",
        default_value_t = AgentLimits::DEFAULT.max_config_bytes
    )]
    pub max_agent_config_bytes: usize,
    /// Most tool calls of one model pass running at once.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_PARALLEL_TOOL_CALLS",
        default_value_t = HarnessSettings::DEFAULT_MAX_PARALLEL_TOOL_CALLS,
        value_parser = within::<usize>(1..)
    )]
    pub max_parallel_tool_calls: usize,
    /// Most messages in a conversation (413 past it).
    #[arg(
        long,
        env = "TOOLSERVER_MAX_CONVERSATION_MESSAGES",
        default_value_t = HarnessSettings::DEFAULT_MAX_CONVERSATION_MESSAGES
    )]
    pub max_conversation_messages: usize,
    /// Largest conversation, in bytes of JSON (413 past it).
    #[arg(
        long,
        env = "TOOLSERVER_MAX_CONVERSATION_BYTES",
        default_value_t = HarnessSettings::DEFAULT_MAX_CONVERSATION_BYTES
    )]
    pub max_conversation_bytes: usize,
    /// Most bytes of conversation messages a server keeps in memory between
    /// turns, so a conversation's next turn reads none of its history from
    /// Postgres (0 keeps none).
    #[arg(
        long,
        env = "TOOLSERVER_CONVERSATION_CACHE_BYTES",
        default_value_t = HarnessSettings::DEFAULT_CONVERSATION_CACHE_BYTES
    )]
    pub conversation_cache_bytes: usize,
    /// Most entries of each kind (agents, the uploaded tools their configs
    /// name, accounts' policies, accounts' scoped policies) a server keeps
    /// read, so a warm turn reads none of them from Postgres first; a
    /// change reaches every server by `NOTIFY`. 0 reads them every turn.
    #[arg(
        long,
        env = "TOOLSERVER_TURN_CONFIG_CACHE_ENTRIES",
        default_value_t = HarnessSettings::DEFAULT_CONFIG_CACHE_ENTRIES
    )]
    pub turn_config_cache_entries: usize,
    /// Longest a turn may run, in seconds (an `error` chunk and
    /// `finishReason: "error"` past it).
    #[arg(
        long,
        env = "TOOLSERVER_MAX_TURN_SECS",
        default_value_t = secs(HarnessSettings::DEFAULT_MAX_TURN_DURATION)
    )]
    pub max_turn_secs: u64,
    /// Seconds a turn's hold on its conversation lasts without renewal
    /// (renewed every third of it while the turn runs); a turn whose server
    /// died is known sooner, by `TOOLSERVER_PROCESS_LIVENESS_MS`.
    #[arg(
        long,
        env = "TOOLSERVER_TURN_LEASE_SECS",
        default_value_t = secs(HarnessSettings::DEFAULT_TURN_LEASE),
        value_parser = within::<u64>(3..)
    )]
    pub turn_lease_secs: u64,
}
