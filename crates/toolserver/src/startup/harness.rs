//! The agent harness: credentials sealing, outbound requests, the tools
//! agents reach, and the detached lifecycle's settings.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;
use toolserver_api::ApiSettings;
use toolserver_bundles::BundleStore;
use toolserver_domain::AgentLimits;
use toolserver_harness::lifecycle::LifecycleSettings;
use toolserver_harness::outbound::{self, OutboundPolicy};
use toolserver_harness::runner_call::RunnerCallSettings;
use toolserver_harness::sealing::SecretBox;
use toolserver_harness::stream::ChunkStore;
use toolserver_harness::tools::{Breakers, ListTimings, McpClients, TavilySettings, ToolSources};
use toolserver_harness::webhooks::WebhookSettings;
use toolserver_harness::{Harness, HarnessSettings, ProviderDefault, ProviderDefaults};
use toolserver_sandbox::Executor;
use url::Url;

use super::streams;
use crate::config::{LifecycleConfig, ServeConfig};
use crate::keys;

/// The database, bundle store and runner backend tools reach.
pub(super) type Sources = (PgPool, Arc<dyn BundleStore>, Arc<dyn Executor>);

/// The harness agents' turns run in.
pub(super) fn build(
    config: &ServeConfig,
    public_url: &Url,
    api: &ApiSettings,
    (pool, bundles, executor): Sources,
    chunks: ChunkStore,
) -> anyhow::Result<Harness> {
    let agents = &config.agents;
    let sealer = SecretBox::new(&sealing_key(config)?);
    let policy = OutboundPolicy {
        allow_private: agents.outbound_allow_private,
    };
    let connect_timeout = Duration::from_millis(agents.outbound_connect_timeout_ms);
    let http =
        outbound::client(&policy, connect_timeout).context("building the outbound HTTP client")?;
    let mcp = McpClients::new(
        policy.clone(),
        connect_timeout,
        ListTimings {
            keep: Duration::from_secs(config.mcp.mcp_list_ttl_secs),
            wait: Duration::from_millis(config.mcp.mcp_list_wait_ms),
            retry_after: Duration::from_secs(config.mcp.mcp_list_retry_secs),
            deadline: api.default_tool_timeout,
        },
    )
    .context("building the MCP client")?;
    let sources = ToolSources {
        pool,
        executor,
        bundles,
        runner: RunnerCallSettings {
            inline_bundle_max_bytes: api.inline_bundle_max_bytes,
            signed_url_ttl: api.signed_url_ttl,
            max_output_bytes: api.max_output_bytes,
        },
        tavily: TavilySettings {
            base_url: agents.tavily_base_url.clone(),
            fallback_api_key: agents.tavily_api_key.clone(),
        },
        sealer,
        fetch_url: public_url.join("runner/fetch").ok(),
        http,
        mcp: Arc::new(mcp),
        policy,
        default_tool_timeout: api.default_tool_timeout,
        breakers: Arc::new(Breakers::new(config.breaker.settings())),
    };
    let settings = HarnessSettings {
        agent_limits: AgentLimits {
            default_steps: agents.default_steps,
            max_steps: agents.max_steps,
            max_system_prompt_chars: agents.max_system_prompt_chars,
            max_config_bytes: agents.max_agent_config_bytes,
            max_tool_timeout_ms: config.runners.max_tool_timeout_ms,
        },
        providers: ProviderDefaults {
            openai: ProviderDefault {
                base_url: agents.openai_base_url.clone(),
                api_key: agents.openai_api_key.clone(),
            },
            anthropic: ProviderDefault {
                base_url: agents.anthropic_base_url.clone(),
                api_key: agents.anthropic_api_key.clone(),
            },
            google: ProviderDefault {
                base_url: agents.google_base_url.clone(),
                api_key: agents.google_api_key.clone(),
            },
        },
        model_max_retry_wait: Duration::from_millis(agents.model_max_retry_wait_ms),
        max_parallel_tool_calls: agents.max_parallel_tool_calls,
        max_conversation_messages: agents.max_conversation_messages,
        max_conversation_bytes: agents.max_conversation_bytes,
        conversation_cache_bytes: agents.conversation_cache_bytes,
        turn_connections: config.database.turn_connections(),
        max_turn_duration: Duration::from_secs(agents.max_turn_secs),
        turn_lease: Duration::from_secs(agents.turn_lease_secs),
        keep_alive: Duration::from_secs(config.streams.sse_keepalive_secs),
        public_url: public_url.clone(),
        async_result_ttl: Duration::from_secs(config.lifecycle.async_result_ttl_secs),
        lifecycle: lifecycle_settings(&config.lifecycle),
        streams: streams::stream_settings(&config.streams, chunks),
        outbound_resolve_timeout: Duration::from_millis(agents.outbound_save_resolve_ms),
        webhooks: WebhookSettings {
            max_attempts: config.webhooks.webhook_max_attempts,
            first_retry: Duration::from_millis(config.webhooks.webhook_retry_ms),
            max_retry: Duration::from_millis(config.webhooks.webhook_max_retry_ms),
            timeout: Duration::from_millis(config.webhooks.webhook_timeout_ms),
            poll: Duration::from_millis(config.webhooks.webhook_poll_ms),
            signature_window: Duration::from_secs(config.webhooks.webhook_signature_window_secs),
        },
        ledger: config.ledger.settings(),
        config_cache_entries: agents.turn_config_cache_entries,
    };
    Ok(Harness::new(sources, settings))
}

/// The key sealing agent credentials: the configured one, else one kept
/// in the data directory.
fn sealing_key(config: &ServeConfig) -> anyhow::Result<[u8; 32]> {
    let (key_hex, source) = match &config.agents.secrets_key {
        Some(key) => (key.expose().to_owned(), "TOOLSERVER_SECRETS_KEY".to_owned()),
        None => {
            let path = config.database.data_dir.join("secrets.key");
            tracing::warn!(path = %path.display(), "TOOLSERVER_SECRETS_KEY is not set; using a key kept in the data directory");
            (
                keys::load_or_create_secret(&path)?,
                path.display().to_string(),
            )
        }
    };
    hex::decode(key_hex.trim())
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .with_context(|| format!("{source} must hold 64 hex characters (32 bytes)"))
}

/// The detached lifecycle's settings.
fn lifecycle_settings(config: &LifecycleConfig) -> LifecycleSettings {
    let ms = Duration::from_millis;
    LifecycleSettings {
        claim: ms(config.job_claim_ms),
        poll: ms(config.continuation_poll_ms),
        max_concurrent_jobs: config.max_concurrent_jobs,
        max_attempts: config.job_max_attempts,
        busy_backoff: ms(config.job_busy_backoff_ms),
        retry_backoff: ms(config.job_retry_backoff_ms),
        reaper_interval: ms(config.async_reaper_ms),
        liveness_timeout: ms(config.runner_liveness_timeout_ms),
        liveness_interval: ms(config.runner_liveness_interval_ms),
        completion_retry: ms(config.completion_retry_ms),
        max_call_launches: config.max_call_launches,
        process_liveness: ms(config.process_liveness_ms),
        unsealed_group_grace: Duration::from_secs(config.unsealed_group_grace_secs),
        stuck_turn_grace: Duration::from_secs(config.stuck_turn_grace_secs),
        approval_ttl: Duration::from_secs(config.approval_ttl_secs),
        approval_resume_grace: Duration::from_secs(config.approval_resume_grace_secs),
        authorization_ttl: Duration::from_secs(config.authorization_ttl_secs),
        connection_refresh_ahead: Duration::from_secs(config.connection_refresh_ahead_secs),
    }
}
