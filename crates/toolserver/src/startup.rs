//! Building the running server from its configuration: token verification,
//! the runner backend (refusing to start where runners cannot be isolated,
//! see [`crate::runner_isolation`]), database (external or embedded),
//! migrations, bundle store, then the listener.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use jsonwebtoken::{Algorithm, DecodingKey};
use sqlx::PgPool;
use toolserver_api::admission::{AdmissionSettings, AdmittedRunnerCaps};
use toolserver_api::auth::OperatorKey;
use toolserver_api::auth::{AuthSettings, Authenticator, JwksKeys, KeySource};
use toolserver_api::cors::CorsSettings;
use toolserver_api::mcp::McpSettings;
use toolserver_api::{ApiSettings, AppState};
use toolserver_bundles::{BundleStore, FsBundleStore, S3BundleStore, S3Settings, UrlSigner};
use toolserver_domain::{AccountLimits, AgentLimits, ToolLimits};
use toolserver_harness::lifecycle::LifecycleSettings;
use toolserver_harness::outbound::{self, OutboundPolicy};
use toolserver_harness::runner_call::RunnerCallSettings;
use toolserver_harness::sealing::SecretBox;
use toolserver_harness::stream::{ChunkStore, JetStreamChunks, JetStreamSettings, StreamSettings};
use toolserver_harness::tools::{McpClients, TavilySettings, ToolSources};
use toolserver_harness::{Harness, HarnessSettings};
use toolserver_kubernetes::{
    CacheVolume, KubernetesExecutor, KubernetesSettings, RunnerChannel, RunnerResources,
    SharedEgress,
};
use toolserver_sandbox::{
    AccountRunnerCaps, BudgetSettings, EgressKey, EgressProxy, EgressSettings, Executor,
    LocalExecutor, LocalSettings, RunnerBudget, RunnerLimits,
};
use toolserver_store::PoolSettings;
use url::Url;

use crate::config::{
    AccountsConfig, AgentsConfig, AuthConfig, BundleBackend, BundleConfig, CacheVolumeKind,
    ChannelKind, CorsConfig, DatabaseConfig, EgressConfig, EgressProxyConfig, ExecutorKind,
    JwtAlgorithm, LimitsConfig, RunnerConfig, ServeConfig, TurnChunks,
};
use crate::embedded_pg::EmbeddedPostgres;
use crate::keys;
use crate::metrics_endpoint::{self, MetricsListen, MetricsServer};
use crate::runner_isolation;
use crate::telemetry::{self, Telemetry};

/// Lifetime of the development token printed at start.
const DEV_TOKEN_TTL_SECS: i64 = 30 * 24 * 3600;

/// Where the development JWT secret is kept.
pub fn dev_secret_path(db: &DatabaseConfig) -> PathBuf {
    db.data_dir.join("dev-jwt.key")
}

/// A connected, migrated database, and the private cluster behind it if any.
struct Database {
    pool: PgPool,
    embedded: Option<EmbeddedPostgres>,
}

async fn open_database(config: &DatabaseConfig) -> anyhow::Result<Database> {
    let (url, embedded) = match &config.database_url {
        Some(url) => (url.clone(), None),
        None => {
            let (cluster, url) =
                EmbeddedPostgres::start(&config.data_dir, config.postgres_bin_dir.as_deref())
                    .await?;
            (url, Some(cluster))
        }
    };
    let settings = PoolSettings {
        max_connections: config.db_max_connections,
        acquire_timeout: Duration::from_millis(config.db_acquire_timeout_ms),
    };
    let pool = toolserver_store::connect(&url, settings)
        .await
        .context("connecting to Postgres")?;
    toolserver_store::migrate(&pool)
        .await
        .context("applying migrations")?;
    Ok(Database { pool, embedded })
}

/// `toolserver migrate`.
pub async fn migrate_only(config: &DatabaseConfig) -> anyhow::Result<()> {
    let db = open_database(config).await?;
    println!("migrations applied");
    if let Some(cluster) = db.embedded {
        db.pool.close().await;
        cluster.stop();
    }
    Ok(())
}

/// Everything a server process runs with, and its background loops.
struct Assembled {
    state: AppState,
    db: Database,
    public_url: Url,
    telemetry: Telemetry,
    _loops: Vec<tokio::task::JoinHandle<()>>,
}

/// Builds the shared state and starts the background loops: idle runner
/// reaping, expiry of detached calls, and continuations.
async fn assemble(config: &ServeConfig) -> anyhow::Result<Assembled> {
    let telemetry = telemetry::init(&config.log)?;
    let public_url = match &config.public_url {
        Some(url) => url.clone(),
        None => Url::parse(&format!("http://{}", config.bind))?,
    };
    let cors = cors_settings(&config.cors)?;
    let on_dev_secret = uses_development_secret(&config.auth, &config.database);
    let auth = authenticator(&config.auth, &config.database, on_dev_secret)?;
    // Before the database: a server that may not run tools refuses at once.
    let development = runner_isolation::development_server(&config.auth, on_dev_secret);
    let caps = Arc::new(AdmittedRunnerCaps::new(
        usize::try_from(config.accounts.account_live_runners).unwrap_or(usize::MAX),
    ));
    let (executor, runner_reaper) = executor(
        &config.runners,
        &config.database,
        &public_url,
        development,
        caps.clone(),
    )
    .await?;
    let db = open_database(&config.database).await?;
    let bundles = bundle_store(&config.bundles, &config.database, &public_url).await?;
    let api = ApiSettings {
        cors,
        max_socket_requests: config.agents.ws_max_requests.max(1),
        mcp: mcp_settings(config)?,
        admission: admission_settings(&config.accounts),
        operator_key: operator_key(&config.accounts)?,
        usage_flush_interval: Duration::from_millis(config.accounts.usage_flush_ms),
        ..api_settings(&config.limits, &config.bundles, &config.runners)
    };
    toolserver_api::metrics::label_accounts(config.accounts.metrics_account_label);
    let nats = connect_nats(&config.agents).await?;
    let chunks = chunk_store(&config.agents, nats.as_ref()).await?;
    let harness = harness(
        config,
        &public_url,
        &api,
        (db.pool.clone(), bundles.clone(), executor.clone()),
        chunks,
    )?;
    let state = AppState::new(
        db.pool.clone(),
        bundles,
        executor,
        auth,
        api,
        harness,
        nats.clone(),
    );
    caps.follow(state.admission());
    let mut loops = Vec::new();
    if let Some(client) = nats {
        let subject = config.agents.nats_subject.clone();
        tracing::info!(%subject, "taking turn requests over NATS");
        loops.push(
            toolserver_api::nats::spawn_turns(state.clone(), client, subject)
                .await
                .context("subscribing to the NATS turn subject")?,
        );
    }
    state.lifecycle().start_background();
    Ok(Assembled {
        state,
        db,
        public_url,
        telemetry,
        _loops: loops.into_iter().chain([runner_reaper]).collect(),
    })
}

impl Assembled {
    async fn close(self, grace: Duration) {
        self.state.lifecycle().shutdown(grace).await;
        self.db.pool.close().await;
        if let Some(cluster) = self.db.embedded {
            cluster.stop();
        }
        self.telemetry.shutdown().await;
    }
}

/// `toolserver serve`.
pub async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    let assembled = assemble(&config).await?;
    let _metrics = serve_metrics(&config, &assembled).await?;
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .with_context(|| format!("binding {}", config.bind))?;
    tracing::info!(addr = %listener.local_addr()?, public_url = %assembled.public_url, "listening");
    let grace = Duration::from_secs(config.shutdown_grace_secs);
    let result = toolserver_api::server::serve(
        listener,
        toolserver_api::app(assembled.state.clone()),
        toolserver_api::server::termination_signal(),
        grace,
    )
    .await;
    assembled.close(grace).await;
    result.context("serving")
}

/// `toolserver worker`: runs continuations and expiry sweeps without
/// serving HTTP, until SIGTERM or Ctrl-C. Any number may run beside the
/// servers against one database.
pub async fn worker(config: ServeConfig) -> anyhow::Result<()> {
    let assembled = assemble(&config).await?;
    let _metrics = serve_metrics(&config, &assembled).await?;
    tracing::info!("worker running continuations");
    toolserver_api::server::termination_signal().await;
    assembled
        .close(Duration::from_secs(config.shutdown_grace_secs))
        .await;
    Ok(())
}

/// Starts the metrics listener unless `TOOLSERVER_METRICS_BIND` is `off`.
async fn serve_metrics(
    config: &ServeConfig,
    assembled: &Assembled,
) -> anyhow::Result<Option<MetricsServer>> {
    match config.metrics_bind {
        MetricsListen::Off => Ok(None),
        MetricsListen::At(address) => metrics_endpoint::start(address, assembled.db.pool.clone())
            .await
            .map(Some),
    }
}

/// The MCP server's settings; its metadata names the configured
/// authorization servers, else the JWT issuer when it is an http(s) URL,
/// else (an empty list) the server's own origin. A configured
/// authorization server that is not an http(s) URL fails the start.
fn mcp_settings(config: &ServeConfig) -> anyhow::Result<McpSettings> {
    let mcp = &config.mcp;
    if let Some(bad) = mcp
        .mcp_authorization_servers
        .iter()
        .find(|server| !is_http_url(server))
    {
        anyhow::bail!("TOOLSERVER_MCP_AUTHORIZATION_SERVERS: {bad:?} is not an http(s) URL");
    }
    let authorization_servers = match mcp.mcp_authorization_servers.is_empty() {
        true => config
            .auth
            .jwt_issuer
            .iter()
            .filter(|issuer| is_http_url(issuer))
            .cloned()
            .collect(),
        false => mcp.mcp_authorization_servers.clone(),
    };
    Ok(McpSettings {
        task_ttl: Duration::from_secs(mcp.mcp_task_ttl_secs.max(1)),
        task_poll_interval: Duration::from_millis(mcp.mcp_task_poll_ms.max(1)),
        task_inline_window: Duration::from_millis(mcp.mcp_task_inline_ms),
        page_size: mcp.mcp_page_size.max(1),
        allowed_hosts: mcp.mcp_allowed_hosts.clone(),
        authorization_servers,
    })
}

/// Whether `raw` is an absolute http(s) URL.
fn is_http_url(raw: &str) -> bool {
    Url::parse(raw).is_ok_and(|url| matches!(url.scheme(), "http" | "https"))
}

/// Connects to NATS when `TOOLSERVER_NATS_URL` is set.
async fn connect_nats(config: &AgentsConfig) -> anyhow::Result<Option<async_nats::Client>> {
    let Some(url) = &config.nats_url else {
        return Ok(None);
    };
    let client = async_nats::connect(url.as_str())
        .await
        .with_context(|| format!("connecting to NATS at {url}"))?;
    Ok(Some(client))
}

/// Where turn streams keep their chunks (`TOOLSERVER_TURN_CHUNKS`): in
/// JetStream on the NATS server (the default when there is one), whose
/// stream is created or updated here, else in Postgres.
async fn chunk_store(
    agents: &AgentsConfig,
    nats: Option<&async_nats::Client>,
) -> anyhow::Result<ChunkStore> {
    let kind = agents.turn_chunks.unwrap_or(match nats {
        Some(_) => TurnChunks::Nats,
        None => TurnChunks::Postgres,
    });
    let client = match (kind, nats) {
        (TurnChunks::Postgres, _) => return Ok(ChunkStore::Postgres),
        (TurnChunks::Nats, None) => bail!("TOOLSERVER_TURN_CHUNKS=nats needs TOOLSERVER_NATS_URL"),
        (TurnChunks::Nats, Some(client)) => client.clone(),
    };
    let settings = JetStreamSettings {
        stream: agents.nats_stream.clone(),
        subject_prefix: agents.nats_chunk_prefix.clone(),
    };
    let retention = Duration::from_secs(agents.stream_retention_secs.max(1));
    let chunks = JetStreamChunks::connect(client, settings, retention)
        .await
        .context(
            "setting up the JetStream stream of turn chunks (TOOLSERVER_TURN_CHUNKS=nats, the \
             default with TOOLSERVER_NATS_URL, needs JetStream on the NATS server; \
             TOOLSERVER_TURN_CHUNKS=postgres keeps them in Postgres)",
        )?;
    tracing::info!(
        stream = %agents.nats_stream,
        subject_prefix = %agents.nats_chunk_prefix,
        "turn chunks kept in NATS JetStream"
    );
    Ok(ChunkStore::JetStream(chunks))
}

/// The database, bundle store and runner backend tools reach.
type Sources = (PgPool, Arc<dyn BundleStore>, Arc<dyn Executor>);

fn harness(
    config: &ServeConfig,
    public_url: &Url,
    api: &ApiSettings,
    (pool, bundles, executor): Sources,
    chunks: ChunkStore,
) -> anyhow::Result<Harness> {
    let agents = &config.agents;
    let key_hex = match &agents.secrets_key {
        Some(key) => key.clone(),
        None => {
            let path = config.database.data_dir.join("secrets.key");
            tracing::warn!(path = %path.display(), "TOOLSERVER_SECRETS_KEY is not set; using a key kept in the data directory");
            keys::load_or_create_secret(&path)?
        }
    };
    let key: [u8; 32] = hex::decode(key_hex.trim())
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .context("TOOLSERVER_SECRETS_KEY must be 64 hex characters (32 bytes)")?;
    let policy = OutboundPolicy {
        allow_private: agents.outbound_allow_private,
    };
    let http = outbound::client(
        &policy,
        Duration::from_millis(agents.outbound_connect_timeout_ms),
    )
    .context("building the outbound HTTP client")?;
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
        http,
        mcp: Arc::new(
            McpClients::new(
                policy.clone(),
                Duration::from_millis(agents.outbound_connect_timeout_ms),
                Duration::from_secs(config.mcp.mcp_list_ttl_secs),
                api.default_tool_timeout,
            )
            .context("building the MCP client")?,
        ),
        policy,
        default_tool_timeout: api.default_tool_timeout,
    };
    let settings = HarnessSettings {
        agent_limits: AgentLimits {
            default_steps: agents.default_steps,
            max_steps: agents.max_steps,
            max_system_prompt_chars: agents.max_system_prompt_chars,
            max_config_bytes: agents.max_agent_config_bytes,
            max_tool_timeout_ms: api.max_tool_timeout.as_millis() as u64,
        },
        openai_base_url: agents.openai_base_url.clone(),
        openai_api_key: agents.openai_api_key.clone(),
        max_parallel_tool_calls: agents.max_parallel_tool_calls,
        max_conversation_messages: agents.max_conversation_messages,
        max_conversation_bytes: agents.max_conversation_bytes,
        max_turn_duration: Duration::from_secs(agents.max_turn_secs),
        turn_lease: Duration::from_secs(agents.turn_lease_secs.max(3)),
        keep_alive: Duration::from_secs(agents.sse_keepalive_secs.max(1)),
        public_url: public_url.clone(),
        async_result_ttl: Duration::from_secs(agents.async_result_ttl_secs),
        lifecycle: lifecycle_settings(agents),
        streams: stream_settings(agents, api.request_timeout, chunks),
        outbound_resolve_timeout: Duration::from_millis(agents.outbound_connect_timeout_ms),
    };
    Ok(Harness::new(sources, SecretBox::new(&key), settings))
}

fn cors_settings(config: &CorsConfig) -> anyhow::Result<Option<CorsSettings>> {
    let settings = CorsSettings::parse(
        &config.cors_allowed_origins,
        &config.cors_allowed_methods,
        &config.cors_allowed_headers,
        config.cors_allow_credentials,
        Duration::from_secs(config.cors_max_age_secs),
    )?;
    match &settings {
        Some(settings) => {
            tracing::info!(origins = ?settings.origins, "cross-origin requests allowed")
        }
        None => tracing::debug!(
            "no cross-origin requests allowed (TOOLSERVER_CORS_ALLOWED_ORIGINS is empty)"
        ),
    }
    Ok(settings)
}

fn stream_settings(
    agents: &AgentsConfig,
    request_timeout: Duration,
    chunks: ChunkStore,
) -> StreamSettings {
    let poll = Duration::from_millis(agents.stream_poll_ms.max(10));
    let hold_ceiling = request_timeout.saturating_sub(Duration::from_secs(1));
    StreamSettings {
        poll,
        alive: Duration::from_millis(agents.stream_alive_ms).max(poll * 2),
        retention: Duration::from_secs(agents.stream_retention_secs),
        max_batch: agents.stream_max_batch.clamp(1, 10_000),
        writers: agents.stream_writers.clamp(1, 64),
        max_group: agents.stream_max_group.clamp(1, 10_000),
        commit_delay: Duration::from_micros(agents.stream_commit_delay_us.min(100_000)),
        commit_siblings: agents.stream_commit_siblings,
        linger: Duration::from_micros(agents.stream_linger_us.min(100_000)),
        record: agents.stream_recording,
        resume_hold: Duration::from_millis(agents.stream_resume_hold_ms).min(hold_ceiling),
        chunks,
    }
}

/// The longest completion retry a runner accepts (its bound on durations).
const MAX_COMPLETION_RETRY_MS: u64 = (1 << 31) - 1;

fn lifecycle_settings(agents: &AgentsConfig) -> LifecycleSettings {
    let ms = |value: u64| Duration::from_millis(value.max(1));
    LifecycleSettings {
        claim: ms(agents.job_claim_ms.max(300)),
        poll: ms(agents.continuation_poll_ms.max(10)),
        max_concurrent_jobs: agents.max_concurrent_jobs.max(1),
        max_attempts: agents.job_max_attempts.max(1),
        busy_backoff: ms(agents.job_busy_backoff_ms),
        retry_backoff: ms(agents.job_retry_backoff_ms),
        reaper_interval: ms(agents.async_reaper_ms.max(10)),
        liveness_timeout: ms(agents.runner_liveness_timeout_ms),
        liveness_interval: ms(agents.runner_liveness_interval_ms),
        completion_retry: ms(agents.completion_retry_ms.min(MAX_COMPLETION_RETRY_MS)),
        max_call_launches: agents.max_call_launches.max(1),
        process_liveness: ms(agents.process_liveness_ms.max(300)),
        unsealed_group_grace: Duration::from_secs(agents.unsealed_group_grace_secs),
        stuck_turn_grace: Duration::from_secs(agents.stuck_turn_grace_secs),
    }
}

/// The configured runner backend, held to the runner budget, and its idle
/// reaper; `development` lets local runners go unisolated under `auto` (see
/// [`runner_isolation`]).
async fn executor(
    config: &RunnerConfig,
    db: &DatabaseConfig,
    public_url: &Url,
    development: bool,
    caps: Arc<dyn AccountRunnerCaps>,
) -> anyhow::Result<(Arc<dyn Executor>, tokio::task::JoinHandle<()>)> {
    let (backend, reaper) = backend(config, db, public_url, development).await?;
    let budget = RunnerBudget::new(backend, budget_settings(config), caps);
    Ok((Arc::new(budget), reaper))
}

/// The runner budget's settings.
fn budget_settings(config: &RunnerConfig) -> BudgetSettings {
    BudgetSettings {
        max_live: count(config.runner_max_live),
        queue_wait: Duration::from_millis(config.runner_queue_wait_ms),
        queue_depth: count(config.runner_queue_depth),
    }
}

/// A count setting as a `usize`.
fn count(setting: u64) -> usize {
    usize::try_from(setting).unwrap_or(usize::MAX)
}

/// The configured runner backend and its idle reaper.
async fn backend(
    config: &RunnerConfig,
    db: &DatabaseConfig,
    public_url: &Url,
    development: bool,
) -> anyhow::Result<(Arc<dyn Executor>, tokio::task::JoinHandle<()>)> {
    Ok(match config.executor {
        ExecutorKind::Local => {
            let executor = local_executor(config, db, public_url, development)?;
            let reaper = executor.spawn_reaper();
            (Arc::new(executor), reaper)
        }
        ExecutorKind::Kubernetes => {
            let client = toolserver_kubernetes::cluster_client().await?;
            let executor = KubernetesExecutor::new(client, kubernetes_settings(config)?)
                .await
                .context("starting the kubernetes runner backend")?;
            let reaper = executor.spawn_reaper();
            (Arc::new(executor), reaper)
        }
    })
}

fn kubernetes_settings(config: &RunnerConfig) -> anyhow::Result<KubernetesSettings> {
    let k8s = &config.kubernetes;
    let mut settings = KubernetesSettings::new(&k8s.k8s_namespace, &k8s.k8s_runner_image);
    settings.image_pull_policy = k8s.k8s_image_pull_policy.clone();
    settings.runtime_class = k8s.k8s_runtime_class.clone();
    settings.resources = RunnerResources {
        cpu_request: k8s.k8s_cpu_request.clone(),
        cpu_limit: k8s.k8s_cpu_limit.clone(),
        memory_request: k8s.k8s_memory_request.clone(),
        memory_limit: k8s.k8s_memory_limit.clone(),
    };
    settings.tmp_size = k8s.k8s_tmp_size.clone();
    settings.cache = match k8s.k8s_cache_volume {
        CacheVolumeKind::Persistent => CacheVolume::Persistent {
            size: k8s.k8s_cache_size.clone(),
            storage_class: k8s.k8s_cache_storage_class.clone(),
        },
        CacheVolumeKind::Ephemeral => CacheVolume::Ephemeral {
            size: k8s.k8s_cache_size.clone(),
        },
    };
    settings.idle_timeout = Duration::from_secs(config.runner_idle_secs);
    settings.ready_timeout = Duration::from_secs(k8s.k8s_pod_ready_timeout_secs);
    settings.worker_start_timeout = Duration::from_millis(config.runner_start_timeout_ms);
    settings.kill_grace = Duration::from_millis(config.runner_kill_grace_ms);
    settings.network_policy =
        (!k8s.k8s_network_policy.is_empty()).then(|| k8s.k8s_network_policy.clone());
    settings.egress = match (&k8s.k8s_egress_proxy, &k8s.egress_token_key) {
        (Some(proxy), Some(key)) => Some(SharedEgress {
            proxy: proxy.clone(),
            key: EgressKey::new(key)
                .map_err(|reason| anyhow::anyhow!("TOOLSERVER_EGRESS_TOKEN_KEY: {reason}"))?,
        }),
        (Some(_), None) => anyhow::bail!(
            "TOOLSERVER_K8S_EGRESS_PROXY needs TOOLSERVER_EGRESS_TOKEN_KEY, the key the proxy holds"
        ),
        (None, _) => None,
    };
    settings.channel = match k8s.k8s_channel {
        ChannelKind::Direct => RunnerChannel::Direct {
            port: k8s.k8s_channel_port,
            connect_timeout: Duration::from_millis(k8s.k8s_channel_connect_ms),
        },
        ChannelKind::Exec => RunnerChannel::Exec,
    };
    Ok(settings)
}

fn local_executor(
    config: &RunnerConfig,
    db: &DatabaseConfig,
    public_url: &Url,
    development: bool,
) -> anyhow::Result<LocalExecutor> {
    let root = config
        .runner_dir
        .clone()
        .unwrap_or_else(|| db.data_dir.join("runners"));
    let settings = LocalSettings {
        node_binary: config.node_binary.clone(),
        root,
        idle_timeout: Duration::from_secs(config.runner_idle_secs),
        start_timeout: Duration::from_millis(config.runner_start_timeout_ms),
        kill_grace: Duration::from_millis(config.runner_kill_grace_ms),
        isolation: runner_isolation::mode(config.runner_isolation, development),
        bwrap_binary: config.bwrap_binary.clone(),
        egress: egress_settings(&config.egress, Some(public_url.clone())),
        limits: runner_limits(config),
    };
    let executor = LocalExecutor::new(settings)
        .map_err(|err| runner_isolation::explain(err, config.runner_isolation))?;
    runner_isolation::announce(&executor, config.runner_isolation);
    Ok(executor)
}

/// The egress proxy's settings, with `callback_base` for the job callbacks.
fn egress_settings(config: &EgressConfig, callback_base: Option<Url>) -> EgressSettings {
    let timeout = Duration::from_millis(config.runner_egress_timeout_ms);
    EgressSettings {
        allow_private: config.runner_egress_allow_private,
        resolve_overrides: config.runner_egress_test_hosts.iter().cloned().collect(),
        callback_base,
        resolve_timeout: timeout,
        connect_timeout: timeout,
    }
}

/// `toolserver egress-proxy`: the egress proxy Kubernetes runner pods share,
/// until SIGTERM or Ctrl-C.
pub async fn egress_proxy(config: EgressProxyConfig) -> anyhow::Result<()> {
    let telemetry = telemetry::init(&config.log)?;
    let key = EgressKey::new(&config.egress_token_key)
        .map_err(|reason| anyhow::anyhow!("TOOLSERVER_EGRESS_TOKEN_KEY: {reason}"))?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let proxy = EgressProxy::new(egress_settings(&config.egress, config.public_url.clone()));
    let serving = proxy.serve_shared(listener, key);
    tracing::info!(addr = %config.listen, "egress proxy listening");
    toolserver_api::server::termination_signal().await;
    serving.abort();
    telemetry.shutdown().await;
    Ok(())
}

/// The local runners' resource limits from the settings.
fn runner_limits(config: &RunnerConfig) -> RunnerLimits {
    const MIB: u64 = 1024 * 1024;
    RunnerLimits {
        memory_bytes: config.runner_memory_mb.saturating_mul(MIB),
        processes: config.runner_processes,
        open_files: config.runner_open_files,
        file_size_bytes: config.runner_file_size_mb.saturating_mul(MIB),
        disk_bytes: config.runner_disk_mb.saturating_mul(MIB),
        cpu_per_call: Duration::from_millis(config.runner_cpu_ms_per_call),
        check_interval: Duration::from_millis(config.runner_limit_check_ms.max(10)),
    }
}

fn admission_settings(config: &AccountsConfig) -> AdmissionSettings {
    AdmissionSettings {
        enabled: config.admission,
        prompt_refusals: config.account_prompt_refusals,
        refusal_hold: Duration::from_millis(config.refusal_hold_ms),
        defaults: AccountLimits {
            concurrent_calls: config.account_concurrent_calls,
            open_turns: config.account_open_turns,
            pending_detached: config.account_pending_detached,
            live_runners: config.account_live_runners,
            mcp_tasks: config.account_mcp_tasks,
            calls_per_minute: config.account_calls_per_minute,
            call_burst: config.account_call_burst,
            turns_per_minute: config.account_turns_per_minute,
            turn_burst: config.account_turn_burst,
        },
    }
}

fn operator_key(config: &AccountsConfig) -> anyhow::Result<Option<OperatorKey>> {
    config
        .operator_key
        .clone()
        .map(OperatorKey::new)
        .transpose()
        .map_err(|err| anyhow::anyhow!("TOOLSERVER_OPERATOR_KEY: {err}"))
}

fn api_settings(
    limits: &LimitsConfig,
    bundles: &BundleConfig,
    runners: &RunnerConfig,
) -> ApiSettings {
    let tool_limits = ToolLimits {
        max_bundle_bytes: limits.max_bundle_bytes,
        max_description_chars: limits.max_description_chars,
        max_schema_bytes: limits.max_schema_bytes,
        max_config_bytes: limits.max_config_bytes,
    };
    // Room for the largest bundle in base64 plus the largest manifest.
    let default_body = limits.max_bundle_bytes.div_ceil(3) * 4
        + limits.max_schema_bytes
        + limits.max_config_bytes
        + limits.max_description_chars * 4
        + 64 * 1024;
    ApiSettings {
        limits: tool_limits,
        signed_url_ttl: Duration::from_secs(bundles.bundle_url_ttl_secs),
        default_page_size: limits.default_page_size,
        max_page_size: limits.max_page_size,
        max_request_bytes: limits.max_request_bytes.unwrap_or(default_body),
        max_uri_bytes: limits.max_uri_bytes,
        request_timeout: Duration::from_secs(limits.request_timeout_secs),
        default_tool_timeout: Duration::from_millis(runners.tool_timeout_ms),
        max_tool_timeout: Duration::from_millis(runners.max_tool_timeout_ms),
        max_output_bytes: runners.max_output_bytes,
        inline_bundle_max_bytes: runners.inline_bundle_max_bytes,
        ..ApiSettings::default()
    }
}

async fn bundle_store(
    config: &BundleConfig,
    db: &DatabaseConfig,
    public_url: &Url,
) -> anyhow::Result<Arc<dyn BundleStore>> {
    match config.bundle_store {
        BundleBackend::Fs => {
            let key = match &config.bundle_url_secret {
                Some(secret) => secret.clone(),
                None => keys::load_or_create_secret(&db.data_dir.join("bundle-url.key"))?,
            };
            let signer = UrlSigner::new(key.into_bytes(), public_url.clone())
                .context("TOOLSERVER_PUBLIC_URL cannot be a base URL")?;
            let dir = config
                .bundle_dir
                .clone()
                .unwrap_or_else(|| db.data_dir.join("bundles"));
            Ok(Arc::new(FsBundleStore::open(dir, signer).await?))
        }
        BundleBackend::S3 => {
            let bucket = config
                .s3_bucket
                .clone()
                .context("TOOLSERVER_S3_BUCKET is required with TOOLSERVER_BUNDLE_STORE=s3")?;
            let credentials = match (&config.s3_access_key_id, &config.s3_secret_access_key) {
                (Some(key), Some(secret)) => Some((key.clone(), secret.clone())),
                (None, None) => None,
                _ => bail!("set both TOOLSERVER_S3_ACCESS_KEY_ID and TOOLSERVER_S3_SECRET_ACCESS_KEY, or neither"),
            };
            let store = S3BundleStore::connect(S3Settings {
                bucket,
                prefix: config.s3_prefix.clone(),
                region: config.s3_region.clone(),
                endpoint: config.s3_endpoint.clone(),
                force_path_style: config.s3_force_path_style,
                credentials,
            })
            .await;
            store
                .check_bucket()
                .await
                .context("the S3 bucket is not reachable")?;
            Ok(Arc::new(store))
        }
    }
}

/// Whether tokens are verified with the generated development secret: HS256
/// with no secret, key file or JWKS URL, on the embedded database.
fn uses_development_secret(config: &AuthConfig, db: &DatabaseConfig) -> bool {
    config.jwt_algorithm == JwtAlgorithm::Hs256
        && config.jwt_secret.is_none()
        && config.jwt_public_key_file.is_none()
        && config.jwt_jwks_url.is_none()
        && db.database_url.is_none()
}

fn authenticator(
    config: &AuthConfig,
    db: &DatabaseConfig,
    on_dev_secret: bool,
) -> anyhow::Result<Authenticator> {
    let algorithm = match config.jwt_algorithm {
        JwtAlgorithm::Hs256 => Algorithm::HS256,
        JwtAlgorithm::Rs256 => Algorithm::RS256,
        JwtAlgorithm::Es256 => Algorithm::ES256,
    };
    let settings = AuthSettings {
        algorithm,
        issuer: config.jwt_issuer.clone(),
        audience: config.jwt_audience.clone(),
        account_claim: config.jwt_account_claim.clone(),
        leeway: Duration::from_secs(config.jwt_leeway_secs),
    };
    let keys = match (
        algorithm,
        &config.jwt_secret,
        &config.jwt_public_key_file,
        &config.jwt_jwks_url,
    ) {
        (Algorithm::HS256, Some(secret), None, None) => {
            KeySource::Static(Arc::new(DecodingKey::from_secret(secret.as_bytes())))
        }
        (Algorithm::HS256, None, None, None) if on_dev_secret => {
            KeySource::Static(Arc::new(DecodingKey::from_secret(
                dev_secret(config, db)?.as_bytes(),
            )))
        }
        (Algorithm::HS256, _, _, _) => {
            bail!("HS256 needs TOOLSERVER_JWT_SECRET (and no public key or JWKS URL)")
        }
        (_, None, Some(path), None) => {
            let pem = std::fs::read(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let key = match algorithm {
                Algorithm::RS256 => DecodingKey::from_rsa_pem(&pem),
                _ => DecodingKey::from_ec_pem(&pem),
            }
            .with_context(|| format!("{} is not a PEM public key for {algorithm:?}", path.display()))?;
            KeySource::Static(Arc::new(key))
        }
        (_, None, None, Some(url)) => KeySource::Jwks(Arc::new(JwksKeys::new(
            url.clone(),
            reqwest_client()?,
            Duration::from_secs(config.jwt_jwks_refresh_secs),
        ))),
        _ => bail!(
            "{algorithm:?} needs exactly one of TOOLSERVER_JWT_PUBLIC_KEY_FILE or TOOLSERVER_JWT_JWKS_URL"
        ),
    };
    Ok(Authenticator::new(&settings, keys))
}

/// Generates (once) the development secret and prints a ready-to-use token.
fn dev_secret(config: &AuthConfig, db: &DatabaseConfig) -> anyhow::Result<String> {
    let secret = keys::load_or_create_secret(&dev_secret_path(db))?;
    let token = keys::mint_hs256(
        &secret,
        &config.jwt_account_claim,
        "dev",
        DEV_TOKEN_TTL_SECS,
        config.jwt_issuer.as_deref(),
        config.jwt_audience.as_deref(),
    )?;
    let token_path = db.data_dir.join("dev-token");
    std::fs::write(&token_path, &token)?;
    tracing::warn!(
        token_file = %token_path.display(),
        "DEVELOPMENT ONLY: no TOOLSERVER_JWT_SECRET is set, so a local secret was generated. \
         A token for account `dev` is in the token file: export TOKEN=$(cat {})",
        token_path.display()
    );
    Ok(secret)
}

fn reqwest_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()?)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn serve(args: &[&str]) -> ServeConfig {
        let argv = ["toolserver", "serve"].iter().chain(args).copied();
        match Cli::try_parse_from(argv).map(|cli| cli.command) {
            Ok(Command::Serve(config)) => *config,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_metadata_names_the_configured_servers_else_an_http_issuer_else_none() {
        let configured = serve(&[
            "--mcp-authorization-servers",
            "https://as.example.com",
            "--jwt-issuer",
            "https://issuer.example.com",
        ]);
        assert_eq!(
            mcp_settings(&configured).unwrap().authorization_servers,
            ["https://as.example.com"]
        );
        let issuer = serve(&["--jwt-issuer", "https://issuer.example.com"]);
        assert_eq!(
            mcp_settings(&issuer).unwrap().authorization_servers,
            ["https://issuer.example.com"]
        );
        // An issuer that is no URL leaves the metadata to name the server's origin.
        let named = serve(&["--jwt-issuer", "platform"]);
        assert!(mcp_settings(&named)
            .unwrap()
            .authorization_servers
            .is_empty());
    }

    #[test]
    fn an_authorization_server_that_is_no_http_url_stops_the_start() {
        let config = serve(&["--mcp-authorization-servers", "issuer-without-scheme"]);
        let err = mcp_settings(&config).unwrap_err().to_string();
        assert!(
            err.contains("TOOLSERVER_MCP_AUTHORIZATION_SERVERS"),
            "{err}"
        );
    }
}
