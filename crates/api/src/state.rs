//! Shared state handed to every handler.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use toolserver_bundles::BundleStore;
use toolserver_domain::{AgentLimits, ToolId, ToolLimits};
use toolserver_sandbox::Executor;
use toolserver_store::config_changes::ConfigChange;
use toolserver_store::notified::{Listening, Notifications};

use toolserver_harness::lifecycle::{Lifecycle, NoListener, TurnListener};
use toolserver_harness::runner_call::RunnerCallSettings;
use toolserver_harness::tools::ToolSources;
use toolserver_harness::Harness;

use crate::admission::{Admission, AdmissionSettings};
use crate::auth::{AuthState, Authenticator, OperatorKey};
use crate::cors::CorsSettings;
use crate::mcp::settings::McpSettings;
use crate::nats::replies::NatsReplies;
use crate::tool_cache::ToolCache;
use crate::usage::UsageMeter;

/// Limits and knobs of the HTTP API; each is a server setting.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// Limits on uploaded tools.
    pub limits: ToolLimits,
    /// Lifetime of minted bundle download URLs.
    pub signed_url_ttl: Duration,
    /// Page size when a list request names none.
    pub default_page_size: u32,
    /// Largest page size a list request may ask for.
    pub max_page_size: u32,
    /// Largest request body, in bytes.
    pub max_request_bytes: usize,
    /// Longest request URL (path and query), in bytes.
    pub max_uri_bytes: usize,
    /// Longest time a request may take to produce its response head.
    pub request_timeout: Duration,
    /// Tool call deadline when the caller names none.
    pub default_tool_timeout: Duration,
    /// Longest deadline a caller may ask for.
    pub max_tool_timeout: Duration,
    /// Largest serialized output of one tool call, in bytes.
    pub max_output_bytes: u64,
    /// Bundles up to this size travel inline to the runner; larger ones by signed URL.
    pub inline_bundle_max_bytes: u64,
    /// Cross-origin access for browsers; `None` (the default): no origin.
    pub cors: Option<CorsSettings>,
    /// Most requests one chat WebSocket answers at once.
    pub max_socket_requests: usize,
    /// The MCP server.
    pub mcp: McpSettings,
    /// Per-account limits checked before work starts.
    pub admission: AdmissionSettings,
    /// The key of the operator routes; `None`: they are switched off.
    pub operator_key: Option<OperatorKey>,
    /// How often runner usage is added to the stored period totals.
    pub usage_flush_interval: Duration,
    /// Most tools kept read and compiled for direct calls (0: none).
    pub tool_cache_entries: usize,
    /// How long a direct call's `Idempotency-Key` is kept, with its result.
    pub invoke_idempotency_ttl: Duration,
}

impl ApiSettings {
    /// The settings' defaults.
    pub const DEFAULT: Self = Self {
        limits: ToolLimits::DEFAULT,
        signed_url_ttl: RunnerCallSettings::DEFAULT.signed_url_ttl,
        default_page_size: 50,
        max_page_size: 200,
        max_request_bytes: Self::room_for_uploads(&ToolLimits::DEFAULT),
        max_uri_bytes: 8192,
        request_timeout: Duration::from_secs(30),
        default_tool_timeout: ToolSources::DEFAULT_TOOL_TIMEOUT,
        max_tool_timeout: Duration::from_millis(AgentLimits::DEFAULT.max_tool_timeout_ms),
        max_output_bytes: RunnerCallSettings::DEFAULT.max_output_bytes,
        inline_bundle_max_bytes: RunnerCallSettings::DEFAULT.inline_bundle_max_bytes,
        cors: None,
        max_socket_requests: 16,
        mcp: McpSettings::DEFAULT,
        admission: AdmissionSettings::OFF,
        operator_key: None,
        usage_flush_interval: Duration::from_secs(10),
        tool_cache_entries: 10_000,
        invoke_idempotency_ttl: Duration::from_secs(24 * 60 * 60),
    };

    /// The default largest request body under `limits`: room for the
    /// largest bundle in base64 plus the largest manifest.
    pub const fn room_for_uploads(limits: &ToolLimits) -> usize {
        limits.max_bundle_bytes.div_ceil(3) * 4
            + limits.max_schema_bytes
            + limits.max_config_bytes
            + limits.max_description_chars * 4
            + 64 * 1024
    }
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Cheap-to-clone handle on everything handlers need.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    pool: PgPool,
    bundles: Arc<dyn BundleStore>,
    executor: Arc<dyn Executor>,
    auth: Authenticator,
    settings: ApiSettings,
    harness: Arc<Harness>,
    lifecycle: Lifecycle,
    admission: Arc<Admission>,
    usage: Arc<UsageMeter>,
    tools: Arc<ToolCache>,
    /// The process's one listening connection, stopped with the state.
    _listening: Listening,
}

impl AppState {
    /// Bundles the server's parts.
    pub fn new(
        pool: PgPool,
        bundles: Arc<dyn BundleStore>,
        executor: Arc<dyn Executor>,
        auth: Authenticator,
        settings: ApiSettings,
        harness: Harness,
        nats: Option<async_nats::Client>,
    ) -> Self {
        let harness = Arc::new(harness);
        let mut notifications = Notifications::new();
        if harness.settings().config_cache_entries > 0 {
            harness.config_cache().follow(&mut notifications);
        }
        let listener: Arc<dyn TurnListener> = match &nats {
            Some(client) => Arc::new(NatsReplies::new(client.clone(), pool.clone())),
            None => Arc::new(NoListener),
        };
        let lifecycle = Lifecycle::new(
            pool.clone(),
            harness.clone(),
            executor.clone(),
            listener,
            &mut notifications,
        );
        let admission = Arc::new(Admission::new(pool.clone(), settings.admission.clone()));
        if admission.enabled() {
            admission.follow(&mut notifications);
        }
        let usage = Arc::new(UsageMeter::new(pool.clone(), executor.clone()));
        usage.spawn_flusher(settings.usage_flush_interval);
        let tools = Arc::new(ToolCache::new(pool.clone(), settings.tool_cache_entries));
        if settings.tool_cache_entries > 0 {
            tools.follow(&mut notifications);
        }
        let listening = notifications.start(&pool);
        Self(Arc::new(Inner {
            _listening: listening,
            tools,
            admission,
            usage,
            pool,
            bundles,
            executor,
            auth,
            settings,
            harness,
            lifecycle,
        }))
    }

    /// The agent harness.
    pub fn harness(&self) -> &Harness {
        &self.0.harness
    }

    /// The detached-turn lifecycle.
    pub fn lifecycle(&self) -> &Lifecycle {
        &self.0.lifecycle
    }

    /// Per-account admission.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.0.admission
    }

    /// Runner usage per account and period.
    pub fn usage(&self) -> &Arc<UsageMeter> {
        &self.0.usage
    }

    /// Recently called tools, read and compiled.
    pub fn tools(&self) -> &ToolCache {
        &self.0.tools
    }

    /// Drops what this process cached of tool `id` (after a change to it,
    /// before the change is answered).
    pub fn tool_changed(&self, id: ToolId) {
        self.0.tools.invalidate(id);
        self.0.harness.config_cache().tool_changed(id);
    }

    /// Drops what this process cached of what `change` names (after the
    /// change, before it is answered).
    pub fn config_changed(&self, change: &ConfigChange) {
        self.0.harness.config_cache().changed(change);
    }

    /// The database pool.
    pub fn pool(&self) -> &PgPool {
        &self.0.pool
    }

    /// The bundle store.
    pub fn bundles(&self) -> &dyn BundleStore {
        self.0.bundles.as_ref()
    }

    /// Where uploaded tools run.
    pub fn executor(&self) -> &Arc<dyn Executor> {
        &self.0.executor
    }

    /// The token verifier.
    pub fn auth(&self) -> &Authenticator {
        &self.0.auth
    }

    /// API limits and knobs.
    pub fn settings(&self) -> &ApiSettings {
        &self.0.settings
    }
}

impl AuthState for AppState {
    fn authenticator(&self) -> &Authenticator {
        &self.0.auth
    }

    fn operator_key(&self) -> Option<&OperatorKey> {
        self.0.settings.operator_key.as_ref()
    }
}
