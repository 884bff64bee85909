//! Typed configuration, read from environment variables (or the equivalent
//! command-line flags). Every setting, its variable and its default are listed
//! here and in the README; a bad value stops the server at start.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use url::Url;

use crate::metrics_endpoint::MetricsListen;

/// Settings of `toolserver serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    /// Address and port to listen on (`TOOLSERVER_BIND`).
    #[arg(long, env = "TOOLSERVER_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Base URL clients and runners use to reach this server; signed bundle
    /// links start with it (`TOOLSERVER_PUBLIC_URL`, default `http://<bind>`).
    #[arg(long, env = "TOOLSERVER_PUBLIC_URL")]
    pub public_url: Option<Url>,
    /// Where `GET /metrics` (Prometheus text) is served, apart from the API,
    /// or `off` (`TOOLSERVER_METRICS_BIND`).
    #[arg(
        long,
        env = "TOOLSERVER_METRICS_BIND",
        default_value = "127.0.0.1:9464",
        value_parser = crate::metrics_endpoint::parse_listen
    )]
    pub metrics_bind: MetricsListen,
    /// Seconds in-flight requests get to finish after SIGTERM (`TOOLSERVER_SHUTDOWN_GRACE_SECS`).
    #[arg(long, env = "TOOLSERVER_SHUTDOWN_GRACE_SECS", default_value_t = 30)]
    pub shutdown_grace_secs: u64,
    /// Database settings.
    #[command(flatten)]
    pub database: DatabaseConfig,
    /// Bundle store settings.
    #[command(flatten)]
    pub bundles: BundleConfig,
    /// Token verification settings.
    #[command(flatten)]
    pub auth: AuthConfig,
    /// Runner settings.
    #[command(flatten)]
    pub runners: RunnerConfig,
    /// Request and upload limits.
    #[command(flatten)]
    pub limits: LimitsConfig,
    /// Agents, models and turns.
    #[command(flatten)]
    pub agents: AgentsConfig,
    /// Cross-origin access.
    #[command(flatten)]
    pub cors: CorsConfig,
    /// The MCP server and MCP servers agents use.
    #[command(flatten)]
    pub mcp: McpConfig,
    /// Per-account limits and the operator routes.
    #[command(flatten)]
    pub accounts: AccountsConfig,
    /// Logging settings.
    #[command(flatten)]
    pub log: LogConfig,
}

/// Where Postgres is.
#[derive(Debug, Clone, Args)]
pub struct DatabaseConfig {
    /// Postgres URL (`DATABASE_URL`). Unset: a private cluster is started
    /// under the data directory with the machine's PostgreSQL binaries.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Directory for local state: the private cluster, the filesystem bundle
    /// store, development keys (`TOOLSERVER_DATA_DIR`).
    #[arg(long, env = "TOOLSERVER_DATA_DIR", default_value = ".toolserver")]
    pub data_dir: PathBuf,
    /// Directory with `initdb` and `pg_ctl` for the private cluster
    /// (`TOOLSERVER_POSTGRES_BIN_DIR`; default: the newest
    /// `/usr/lib/postgresql/<version>/bin`, then `PATH`).
    #[arg(long, env = "TOOLSERVER_POSTGRES_BIN_DIR")]
    pub postgres_bin_dir: Option<PathBuf>,
    /// Largest number of pooled connections (`TOOLSERVER_DB_MAX_CONNECTIONS`).
    #[arg(long, env = "TOOLSERVER_DB_MAX_CONNECTIONS", default_value_t = 10)]
    pub db_max_connections: u32,
    /// Milliseconds a query waits for a pooled connection before answering 503
    /// (`TOOLSERVER_DB_ACQUIRE_TIMEOUT_MS`).
    #[arg(long, env = "TOOLSERVER_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 5000)]
    pub db_acquire_timeout_ms: u64,
}

/// Which bundle store backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BundleBackend {
    /// Files under `TOOLSERVER_BUNDLE_DIR`.
    Fs,
    /// An S3 bucket (AWS or S3-compatible).
    S3,
}

/// Bundle store settings.
#[derive(Debug, Clone, Args)]
pub struct BundleConfig {
    /// `fs` or `s3` (`TOOLSERVER_BUNDLE_STORE`).
    #[arg(
        long,
        env = "TOOLSERVER_BUNDLE_STORE",
        value_enum,
        default_value = "fs"
    )]
    pub bundle_store: BundleBackend,
    /// Directory of the filesystem store (`TOOLSERVER_BUNDLE_DIR`, default `<data dir>/bundles`).
    #[arg(long, env = "TOOLSERVER_BUNDLE_DIR")]
    pub bundle_dir: Option<PathBuf>,
    /// Key for signing filesystem download links (`TOOLSERVER_BUNDLE_URL_SECRET`;
    /// default: generated once and kept in `<data dir>/bundle-url.key`).
    #[arg(long, env = "TOOLSERVER_BUNDLE_URL_SECRET", hide_env_values = true)]
    pub bundle_url_secret: Option<String>,
    /// Lifetime of signed bundle links in seconds (`TOOLSERVER_BUNDLE_URL_TTL_SECS`).
    #[arg(long, env = "TOOLSERVER_BUNDLE_URL_TTL_SECS", default_value_t = 300)]
    pub bundle_url_ttl_secs: u64,
    /// S3 bucket (`TOOLSERVER_S3_BUCKET`; required with the s3 store).
    #[arg(long, env = "TOOLSERVER_S3_BUCKET")]
    pub s3_bucket: Option<String>,
    /// Key prefix inside the bucket (`TOOLSERVER_S3_PREFIX`).
    #[arg(long, env = "TOOLSERVER_S3_PREFIX", default_value = "bundles/")]
    pub s3_prefix: String,
    /// Region (`TOOLSERVER_S3_REGION`).
    #[arg(long, env = "TOOLSERVER_S3_REGION", default_value = "us-east-1")]
    pub s3_region: String,
    /// Endpoint of an S3-compatible store; unset for AWS (`TOOLSERVER_S3_ENDPOINT`).
    #[arg(long, env = "TOOLSERVER_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// Path-style addressing, needed by most S3-compatible stores (`TOOLSERVER_S3_FORCE_PATH_STYLE`).
    #[arg(long, env = "TOOLSERVER_S3_FORCE_PATH_STYLE", default_value_t = false)]
    pub s3_force_path_style: bool,
    /// Access key id; unset: the standard AWS credential chain (`TOOLSERVER_S3_ACCESS_KEY_ID`).
    #[arg(long, env = "TOOLSERVER_S3_ACCESS_KEY_ID")]
    pub s3_access_key_id: Option<String>,
    /// Secret access key (`TOOLSERVER_S3_SECRET_ACCESS_KEY`).
    #[arg(long, env = "TOOLSERVER_S3_SECRET_ACCESS_KEY", hide_env_values = true)]
    pub s3_secret_access_key: Option<String>,
}

/// The accepted token algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum JwtAlgorithm {
    /// HMAC-SHA256 with a shared secret.
    Hs256,
    /// RSA PKCS#1 v1.5 with SHA-256.
    Rs256,
    /// ECDSA P-256 with SHA-256.
    Es256,
}

/// Token verification settings.
#[derive(Debug, Clone, Args)]
pub struct AuthConfig {
    /// The only accepted algorithm (`TOOLSERVER_JWT_ALGORITHM`).
    #[arg(
        long,
        env = "TOOLSERVER_JWT_ALGORITHM",
        value_enum,
        default_value = "HS256"
    )]
    pub jwt_algorithm: JwtAlgorithm,
    /// HS256 shared secret (`TOOLSERVER_JWT_SECRET`).
    #[arg(long, env = "TOOLSERVER_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// PEM file with the RS256/ES256 public key (`TOOLSERVER_JWT_PUBLIC_KEY_FILE`).
    #[arg(long, env = "TOOLSERVER_JWT_PUBLIC_KEY_FILE")]
    pub jwt_public_key_file: Option<PathBuf>,
    /// JWKS URL publishing RS256/ES256 keys by `kid` (`TOOLSERVER_JWT_JWKS_URL`).
    #[arg(long, env = "TOOLSERVER_JWT_JWKS_URL")]
    pub jwt_jwks_url: Option<Url>,
    /// Least seconds between JWKS refetches on an unknown `kid` (`TOOLSERVER_JWT_JWKS_REFRESH_SECS`).
    #[arg(long, env = "TOOLSERVER_JWT_JWKS_REFRESH_SECS", default_value_t = 60)]
    pub jwt_jwks_refresh_secs: u64,
    /// Required `iss` claim (`TOOLSERVER_JWT_ISSUER`).
    #[arg(long, env = "TOOLSERVER_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,
    /// Required `aud` claim (`TOOLSERVER_JWT_AUDIENCE`).
    #[arg(long, env = "TOOLSERVER_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// Claim that names the account (`TOOLSERVER_JWT_ACCOUNT_CLAIM`).
    #[arg(
        long,
        env = "TOOLSERVER_JWT_ACCOUNT_CLAIM",
        default_value = "account_id"
    )]
    pub jwt_account_claim: String,
    /// Seconds of clock skew tolerated on `exp`/`nbf` (`TOOLSERVER_JWT_LEEWAY_SECS`).
    #[arg(long, env = "TOOLSERVER_JWT_LEEWAY_SECS", default_value_t = 30)]
    pub jwt_leeway_secs: u64,
}

/// Request and upload limits.
#[derive(Debug, Clone, Args)]
pub struct LimitsConfig {
    /// Largest bundle in bytes, inclusive (`TOOLSERVER_MAX_BUNDLE_BYTES`).
    #[arg(long, env = "TOOLSERVER_MAX_BUNDLE_BYTES", default_value_t = 1_048_576)]
    pub max_bundle_bytes: usize,
    /// Longest tool description in characters (`TOOLSERVER_MAX_DESCRIPTION_CHARS`).
    #[arg(long, env = "TOOLSERVER_MAX_DESCRIPTION_CHARS", default_value_t = 4096)]
    pub max_description_chars: usize,
    /// Largest `inputSchema` in bytes of JSON (`TOOLSERVER_MAX_SCHEMA_BYTES`).
    #[arg(long, env = "TOOLSERVER_MAX_SCHEMA_BYTES", default_value_t = 65_536)]
    pub max_schema_bytes: usize,
    /// Largest `defaultConfig` in bytes of JSON (`TOOLSERVER_MAX_CONFIG_BYTES`).
    #[arg(long, env = "TOOLSERVER_MAX_CONFIG_BYTES", default_value_t = 65_536)]
    pub max_config_bytes: usize,
    /// Largest request body in bytes (`TOOLSERVER_MAX_REQUEST_BYTES`; default:
    /// room for a base64 bundle of the largest size plus its manifest).
    #[arg(long, env = "TOOLSERVER_MAX_REQUEST_BYTES")]
    pub max_request_bytes: Option<usize>,
    /// Longest request URL, path and query, in bytes (`TOOLSERVER_MAX_URI_BYTES`).
    #[arg(long, env = "TOOLSERVER_MAX_URI_BYTES", default_value_t = 8192)]
    pub max_uri_bytes: usize,
    /// Seconds a request may take to produce its response (`TOOLSERVER_REQUEST_TIMEOUT_SECS`).
    #[arg(long, env = "TOOLSERVER_REQUEST_TIMEOUT_SECS", default_value_t = 30)]
    pub request_timeout_secs: u64,
    /// Page size of list routes when none is asked for (`TOOLSERVER_DEFAULT_PAGE_SIZE`).
    #[arg(long, env = "TOOLSERVER_DEFAULT_PAGE_SIZE", default_value_t = 50)]
    pub default_page_size: u32,
    /// Largest page size of list routes (`TOOLSERVER_MAX_PAGE_SIZE`).
    #[arg(long, env = "TOOLSERVER_MAX_PAGE_SIZE", default_value_t = 200)]
    pub max_page_size: u32,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, with the request span's fields.
    Json,
}

/// What the runners' egress proxy lets through: the local one in the server,
/// and `toolserver egress-proxy`.
#[derive(Debug, Clone, Args)]
pub struct EgressConfig {
    /// Let runners reach loopback, private and other non-public addresses
    /// through the egress proxy; for local development only (`TOOLSERVER_RUNNER_EGRESS_ALLOW_PRIVATE`).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_EGRESS_ALLOW_PRIVATE",
        default_value_t = false
    )]
    pub runner_egress_allow_private: bool,
    /// Milliseconds the egress proxy may take to resolve a name, and again to
    /// connect (`TOOLSERVER_RUNNER_EGRESS_TIMEOUT_MS`).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_EGRESS_TIMEOUT_MS",
        default_value_t = 5_000
    )]
    pub runner_egress_timeout_ms: u64,
    /// For tests only: `name=ip,…` answered by the egress proxy instead of
    /// DNS and treated as public (`TOOLSERVER_RUNNER_EGRESS_TEST_HOSTS`).
    #[arg(long, env = "TOOLSERVER_RUNNER_EGRESS_TEST_HOSTS", value_parser = parse_test_host, value_delimiter = ',')]
    pub runner_egress_test_hosts: Vec<(String, std::net::IpAddr)>,
}

/// Settings of `toolserver egress-proxy`, the proxy Kubernetes runner pods
/// share.
#[derive(Debug, Clone, Args)]
pub struct EgressProxyConfig {
    /// Address and port to listen on (`TOOLSERVER_EGRESS_LISTEN`).
    #[arg(long, env = "TOOLSERVER_EGRESS_LISTEN", default_value = "0.0.0.0:3128")]
    pub listen: SocketAddr,
    /// The key egress grants are signed with, shared with the servers; at
    /// least 32 bytes (`TOOLSERVER_EGRESS_TOKEN_KEY`).
    #[arg(long, env = "TOOLSERVER_EGRESS_TOKEN_KEY", hide_env_values = true)]
    pub egress_token_key: String,
    /// The servers' public base URL: its job callbacks are forwarded even
    /// when it is a cluster address (`TOOLSERVER_PUBLIC_URL`).
    #[arg(long, env = "TOOLSERVER_PUBLIC_URL")]
    pub public_url: Option<Url>,
    /// What the proxy lets through.
    #[command(flatten)]
    pub egress: EgressConfig,
    /// Logging settings.
    #[command(flatten)]
    pub log: LogConfig,
}

/// Logging settings.
#[derive(Debug, Clone, Args)]
pub struct LogConfig {
    /// `text` or `json` (`TOOLSERVER_LOG_FORMAT`).
    #[arg(
        long,
        env = "TOOLSERVER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Filter directives, e.g. `info,toolserver_api=debug` (`RUST_LOG`).
    #[arg(long, env = "RUST_LOG", default_value = "info,rmcp=warn")]
    pub log_filter: String,
    /// Base URL of an OTLP/HTTP collector (e.g. `http://collector:4318`);
    /// spans go to `<url>/v1/traces`. Unset: no trace export
    /// (`TOOLSERVER_OTLP_ENDPOINT`).
    #[arg(long, env = "TOOLSERVER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<Url>,
    /// Which spans are exported, as filter directives (`TOOLSERVER_OTLP_FILTER`).
    #[arg(long, env = "TOOLSERVER_OTLP_FILTER", default_value = "info")]
    pub otlp_filter: String,
    /// The `service.name` of exported traces (`TOOLSERVER_OTLP_SERVICE_NAME`).
    #[arg(
        long,
        env = "TOOLSERVER_OTLP_SERVICE_NAME",
        default_value = "toolserver"
    )]
    pub otlp_service_name: String,
}

/// Isolation of local runners. Uploaded code never runs unisolated unless
/// asked for (`none`), or on the development secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RunnerIsolation {
    /// Bubblewrap, or refuse to start without it. Only a server on the
    /// generated development secret (no JWT secret, key, JWKS URL, issuer
    /// or audience configured: `make run`) starts without it, with runners
    /// unisolated and a loud warning.
    Auto,
    /// Bubblewrap, or refuse to start without it.
    Bwrap,
    /// Plain processes (environment and user isolation only): uploaded code
    /// sees the host's files and network. Warned about at start and in
    /// `GET /readyz`.
    None,
}

/// Where turn streams keep their chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TurnChunks {
    /// Rows in Postgres, written in batches.
    Postgres,
    /// Messages in NATS JetStream: a stream per deployment, a subject per
    /// conversation.
    Nats,
}

/// Which runner backend runs uploaded tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecutorKind {
    /// Local child processes (the embedded default).
    Local,
    /// One persistent pod per (account, tool) in a Kubernetes cluster.
    Kubernetes,
}

/// The module cache volume of Kubernetes runners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CacheVolumeKind {
    /// A PersistentVolumeClaim per runner, kept while it is scaled to zero.
    Persistent,
    /// An `emptyDir`, lost with the pod.
    Ephemeral,
}

/// How the server reaches a runner pod's worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChannelKind {
    /// Over the pod network, behind a per-runner bearer secret.
    Direct,
    /// By exec through the API server, for every request.
    Exec,
}

/// Where and how uploaded tools run.
#[derive(Debug, Clone, Args)]
pub struct RunnerConfig {
    /// `local` or `kubernetes` (`TOOLSERVER_EXECUTOR`).
    #[arg(long, env = "TOOLSERVER_EXECUTOR", value_enum, default_value = "local")]
    pub executor: ExecutorKind,
    /// Settings of the `kubernetes` executor.
    #[command(flatten)]
    pub kubernetes: KubernetesConfig,
    /// The `node` executable that runs bundles (`TOOLSERVER_NODE_BINARY`).
    #[arg(long, env = "TOOLSERVER_NODE_BINARY", default_value = "node")]
    pub node_binary: PathBuf,
    /// Directory of local runners (`TOOLSERVER_RUNNER_DIR`, default `<data dir>/runners`).
    #[arg(long, env = "TOOLSERVER_RUNNER_DIR")]
    pub runner_dir: Option<PathBuf>,
    /// `auto` (bubblewrap, or refuse to start unless on the development
    /// secret), `bwrap` (bubblewrap, or refuse to start) or `none` (plain
    /// processes, warned about) (`TOOLSERVER_RUNNER_ISOLATION`).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_ISOLATION",
        value_enum,
        default_value = "auto"
    )]
    pub runner_isolation: RunnerIsolation,
    /// The bubblewrap executable that isolates local runners, looked up on
    /// `PATH` when it is a bare name (`TOOLSERVER_BWRAP_BINARY`).
    #[arg(long, env = "TOOLSERVER_BWRAP_BINARY", default_value = "bwrap")]
    pub bwrap_binary: PathBuf,
    /// What the egress proxy lets runners reach.
    #[command(flatten)]
    pub egress: EgressConfig,
    /// Memory of one runner's processes together, in MiB (`TOOLSERVER_RUNNER_MEMORY_MB`).
    #[arg(long, env = "TOOLSERVER_RUNNER_MEMORY_MB", default_value_t = 512)]
    pub runner_memory_mb: u64,
    /// Processes and threads of one runner together (`TOOLSERVER_RUNNER_PROCESSES`).
    #[arg(long, env = "TOOLSERVER_RUNNER_PROCESSES", default_value_t = 128)]
    pub runner_processes: u64,
    /// Open files per runner process (`TOOLSERVER_RUNNER_OPEN_FILES`).
    #[arg(long, env = "TOOLSERVER_RUNNER_OPEN_FILES", default_value_t = 256)]
    pub runner_open_files: u64,
    /// Largest file a runner may write, in MiB (`TOOLSERVER_RUNNER_FILE_SIZE_MB`).
    #[arg(long, env = "TOOLSERVER_RUNNER_FILE_SIZE_MB", default_value_t = 64)]
    pub runner_file_size_mb: u64,
    /// Disk one runner's directory may take, in MiB (`TOOLSERVER_RUNNER_DISK_MB`).
    #[arg(long, env = "TOOLSERVER_RUNNER_DISK_MB", default_value_t = 256)]
    pub runner_disk_mb: u64,
    /// CPU time a runner may use during one call, in milliseconds (`TOOLSERVER_RUNNER_CPU_MS_PER_CALL`).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_CPU_MS_PER_CALL",
        default_value_t = 120_000
    )]
    pub runner_cpu_ms_per_call: u64,
    /// How often a call's CPU time, disk use and cgroup counters are read, in
    /// milliseconds (`TOOLSERVER_RUNNER_LIMIT_CHECK_MS`).
    #[arg(long, env = "TOOLSERVER_RUNNER_LIMIT_CHECK_MS", default_value_t = 250)]
    pub runner_limit_check_ms: u64,
    /// Seconds without calls before a runner is stopped (`TOOLSERVER_RUNNER_IDLE_SECS`).
    #[arg(long, env = "TOOLSERVER_RUNNER_IDLE_SECS", default_value_t = 300)]
    pub runner_idle_secs: u64,
    /// Milliseconds a starting runner may take to listen (`TOOLSERVER_RUNNER_START_TIMEOUT_MS`).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_START_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub runner_start_timeout_ms: u64,
    /// Milliseconds past a call's deadline before a silent runner is killed (`TOOLSERVER_RUNNER_KILL_GRACE_MS`).
    #[arg(long, env = "TOOLSERVER_RUNNER_KILL_GRACE_MS", default_value_t = 2_000)]
    pub runner_kill_grace_ms: u64,
    /// Most runners live at once, across all accounts (`TOOLSERVER_RUNNER_MAX_LIVE`).
    /// Past it, a call that needs a new runner stops the least recently
    /// used idle one, or waits for one.
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_MAX_LIVE",
        default_value_t = 32,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub runner_max_live: u64,
    /// Milliseconds a call may wait for a runner when a cap is reached
    /// before it is refused (`TOOLSERVER_RUNNER_QUEUE_WAIT_MS`).
    #[arg(long, env = "TOOLSERVER_RUNNER_QUEUE_WAIT_MS", default_value_t = 5_000)]
    pub runner_queue_wait_ms: u64,
    /// Calls of one account that may wait for a runner at once
    /// (`TOOLSERVER_RUNNER_QUEUE_DEPTH`).
    #[arg(long, env = "TOOLSERVER_RUNNER_QUEUE_DEPTH", default_value_t = 64)]
    pub runner_queue_depth: u64,
    /// Default tool call deadline in milliseconds (`TOOLSERVER_TOOL_TIMEOUT_MS`).
    #[arg(long, env = "TOOLSERVER_TOOL_TIMEOUT_MS", default_value_t = 25_000)]
    pub tool_timeout_ms: u64,
    /// Longest deadline a caller may ask for, in milliseconds (`TOOLSERVER_MAX_TOOL_TIMEOUT_MS`).
    #[arg(
        long,
        env = "TOOLSERVER_MAX_TOOL_TIMEOUT_MS",
        default_value_t = 600_000
    )]
    pub max_tool_timeout_ms: u64,
    /// Largest serialized output of one call in bytes (`TOOLSERVER_MAX_OUTPUT_BYTES`).
    #[arg(long, env = "TOOLSERVER_MAX_OUTPUT_BYTES", default_value_t = 4_194_304)]
    pub max_output_bytes: u64,
    /// Bundles up to this size are sent inline; larger ones by signed URL (`TOOLSERVER_INLINE_BUNDLE_MAX_BYTES`).
    #[arg(
        long,
        env = "TOOLSERVER_INLINE_BUNDLE_MAX_BYTES",
        default_value_t = 65_536
    )]
    pub inline_bundle_max_bytes: u64,
}

/// Settings of the `kubernetes` executor. The cluster connection is
/// inferred: the in-cluster service account, else `KUBECONFIG`.
#[derive(Debug, Clone, Args)]
pub struct KubernetesConfig {
    /// Namespace of runner pods (`TOOLSERVER_K8S_NAMESPACE`).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_NAMESPACE",
        default_value = "toolserver-runners"
    )]
    pub k8s_namespace: String,
    /// Runner image: Node and the worker (`TOOLSERVER_K8S_RUNNER_IMAGE`).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_RUNNER_IMAGE",
        default_value = "toolserver-runner:dev"
    )]
    pub k8s_runner_image: String,
    /// `Always`, `IfNotPresent` or `Never` (`TOOLSERVER_K8S_IMAGE_PULL_POLICY`).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_IMAGE_PULL_POLICY",
        default_value = "IfNotPresent",
        value_parser = ["Always", "IfNotPresent", "Never"]
    )]
    pub k8s_image_pull_policy: String,
    /// `runtimeClassName` of runner pods, e.g. `gvisor` (`TOOLSERVER_K8S_RUNTIME_CLASS`).
    #[arg(long, env = "TOOLSERVER_K8S_RUNTIME_CLASS")]
    pub k8s_runtime_class: Option<String>,
    /// CPU request per runner (`TOOLSERVER_K8S_CPU_REQUEST`).
    #[arg(long, env = "TOOLSERVER_K8S_CPU_REQUEST", default_value = "100m")]
    pub k8s_cpu_request: String,
    /// CPU limit per runner (`TOOLSERVER_K8S_CPU_LIMIT`).
    #[arg(long, env = "TOOLSERVER_K8S_CPU_LIMIT", default_value = "1")]
    pub k8s_cpu_limit: String,
    /// Memory request per runner (`TOOLSERVER_K8S_MEMORY_REQUEST`).
    #[arg(long, env = "TOOLSERVER_K8S_MEMORY_REQUEST", default_value = "128Mi")]
    pub k8s_memory_request: String,
    /// Memory limit per runner (`TOOLSERVER_K8S_MEMORY_LIMIT`).
    #[arg(long, env = "TOOLSERVER_K8S_MEMORY_LIMIT", default_value = "512Mi")]
    pub k8s_memory_limit: String,
    /// Size limit of a runner's writable `/tmp` (`TOOLSERVER_K8S_TMP_SIZE`).
    #[arg(long, env = "TOOLSERVER_K8S_TMP_SIZE", default_value = "256Mi")]
    pub k8s_tmp_size: String,
    /// `persistent` (a claim per runner, survives scale to zero) or
    /// `ephemeral` (`TOOLSERVER_K8S_CACHE_VOLUME`).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_CACHE_VOLUME",
        value_enum,
        default_value = "persistent"
    )]
    pub k8s_cache_volume: CacheVolumeKind,
    /// Size of a runner's module cache (`TOOLSERVER_K8S_CACHE_SIZE`).
    #[arg(long, env = "TOOLSERVER_K8S_CACHE_SIZE", default_value = "1Gi")]
    pub k8s_cache_size: String,
    /// Storage class of cache claims; unset: the cluster default
    /// (`TOOLSERVER_K8S_CACHE_STORAGE_CLASS`).
    #[arg(long, env = "TOOLSERVER_K8S_CACHE_STORAGE_CLASS")]
    pub k8s_cache_storage_class: Option<String>,
    /// Seconds a new runner pod may take to become ready (`TOOLSERVER_K8S_POD_READY_TIMEOUT_SECS`).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_POD_READY_TIMEOUT_SECS",
        default_value_t = 120
    )]
    pub k8s_pod_ready_timeout_secs: u64,
    /// NetworkPolicy that must exist in the runner namespace before the
    /// server starts; empty skips the check (`TOOLSERVER_K8S_NETWORK_POLICY`).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_NETWORK_POLICY",
        default_value = "toolserver-runners"
    )]
    pub k8s_network_policy: String,
    /// `direct` (the worker's HTTP port on the pod network, behind a
    /// per-runner secret) or `exec` (every request through the API server,
    /// e.g. for a server outside the cluster) (`TOOLSERVER_K8S_CHANNEL`).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_CHANNEL",
        value_enum,
        default_value = "direct"
    )]
    pub k8s_channel: ChannelKind,
    /// The worker's TCP port on the pod network (`TOOLSERVER_K8S_CHANNEL_PORT`;
    /// the runner NetworkPolicy admits the server on 8790).
    #[arg(long, env = "TOOLSERVER_K8S_CHANNEL_PORT", default_value_t = 8790)]
    pub k8s_channel_port: u16,
    /// Milliseconds opening a connection to a runner pod may take before the
    /// pod is looked up again (`TOOLSERVER_K8S_CHANNEL_CONNECT_MS`).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_CHANNEL_CONNECT_MS",
        default_value_t = 1000
    )]
    pub k8s_channel_connect_ms: u64,
    /// `host:port` of the egress proxy runner pods share (`toolserver
    /// egress-proxy`); unset: pods reach public addresses directly and
    /// per-tool allow lists are not enforced (`TOOLSERVER_K8S_EGRESS_PROXY`).
    #[arg(long, env = "TOOLSERVER_K8S_EGRESS_PROXY")]
    pub k8s_egress_proxy: Option<String>,
    /// The key egress grants are signed with, shared with the proxy; at
    /// least 32 bytes (`TOOLSERVER_EGRESS_TOKEN_KEY`).
    #[arg(long, env = "TOOLSERVER_EGRESS_TOKEN_KEY", hide_env_values = true)]
    pub egress_token_key: Option<String>,
}

/// Agents, model providers, built-in tools and turn limits.
#[derive(Debug, Clone, Args)]
pub struct AgentsConfig {
    /// 32-byte key (64 hex characters) sealing credentials in agent configs
    /// (`TOOLSERVER_SECRETS_KEY`, default: a key generated in the data directory;
    /// every server of one database must share it).
    #[arg(long, env = "TOOLSERVER_SECRETS_KEY", hide_env_values = true)]
    pub secrets_key: Option<String>,
    /// Endpoint of the `openai` provider when an agent names none (`TOOLSERVER_OPENAI_BASE_URL`).
    #[arg(
        long,
        env = "TOOLSERVER_OPENAI_BASE_URL",
        default_value = "https://api.openai.com/v1"
    )]
    pub openai_base_url: Url,
    /// Fallback key of the `openai` provider (`TOOLSERVER_OPENAI_API_KEY`).
    #[arg(long, env = "TOOLSERVER_OPENAI_API_KEY", hide_env_values = true)]
    pub openai_api_key: Option<String>,
    /// Tavily's API base (`TOOLSERVER_TAVILY_BASE_URL`).
    #[arg(
        long,
        env = "TOOLSERVER_TAVILY_BASE_URL",
        default_value = "https://api.tavily.com"
    )]
    pub tavily_base_url: Url,
    /// Service-wide fallback Tavily key (`TOOLSERVER_TAVILY_API_KEY`).
    #[arg(long, env = "TOOLSERVER_TAVILY_API_KEY", hide_env_values = true)]
    pub tavily_api_key: Option<String>,
    /// Allow model and tool requests to loopback and private addresses
    /// (`TOOLSERVER_OUTBOUND_ALLOW_PRIVATE`; for local models and tests only).
    #[arg(
        long,
        env = "TOOLSERVER_OUTBOUND_ALLOW_PRIVATE",
        default_value_t = false
    )]
    pub outbound_allow_private: bool,
    /// Milliseconds to connect to a model provider or tool API (`TOOLSERVER_OUTBOUND_CONNECT_TIMEOUT_MS`).
    #[arg(
        long,
        env = "TOOLSERVER_OUTBOUND_CONNECT_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub outbound_connect_timeout_ms: u64,
    /// Model passes per turn when an agent names none (`TOOLSERVER_DEFAULT_STEPS`).
    #[arg(long, env = "TOOLSERVER_DEFAULT_STEPS", default_value_t = 10)]
    pub default_steps: u32,
    /// Largest `maxSteps` an agent may set (`TOOLSERVER_MAX_STEPS`).
    #[arg(long, env = "TOOLSERVER_MAX_STEPS", default_value_t = 50)]
    pub max_steps: u32,
    /// Longest system prompt, in characters (`TOOLSERVER_MAX_SYSTEM_PROMPT_CHARS`).
    #[arg(
        long,
        env = "TOOLSERVER_MAX_SYSTEM_PROMPT_CHARS",
        default_value_t = 32_768
    )]
    pub max_system_prompt_chars: usize,
    /// Largest agent config, in bytes of JSON (`TOOLSERVER_MAX_AGENT_CONFIG_BYTES`).
    #[arg(
        long,
        env = "TOOLSERVER_MAX_AGENT_CONFIG_BYTES",
        default_value_t = 131_072
    )]
    pub max_agent_config_bytes: usize,
    /// Most tool calls of one model pass running at once (`TOOLSERVER_MAX_PARALLEL_TOOL_CALLS`).
    #[arg(long, env = "TOOLSERVER_MAX_PARALLEL_TOOL_CALLS", default_value_t = 8)]
    pub max_parallel_tool_calls: usize,
    /// Most messages in a conversation (`TOOLSERVER_MAX_CONVERSATION_MESSAGES`).
    #[arg(
        long,
        env = "TOOLSERVER_MAX_CONVERSATION_MESSAGES",
        default_value_t = 1_000
    )]
    pub max_conversation_messages: usize,
    /// Largest conversation, in bytes of JSON (`TOOLSERVER_MAX_CONVERSATION_BYTES`).
    #[arg(
        long,
        env = "TOOLSERVER_MAX_CONVERSATION_BYTES",
        default_value_t = 4_194_304
    )]
    pub max_conversation_bytes: usize,
    /// Longest a turn may run, in seconds (`TOOLSERVER_MAX_TURN_SECS`).
    #[arg(long, env = "TOOLSERVER_MAX_TURN_SECS", default_value_t = 900)]
    pub max_turn_secs: u64,
    /// Seconds a turn's hold on its conversation lasts without renewal
    /// (`TOOLSERVER_TURN_LEASE_SECS`); a turn whose server died is known
    /// sooner, by `TOOLSERVER_PROCESS_LIVENESS_MS`.
    #[arg(long, env = "TOOLSERVER_TURN_LEASE_SECS", default_value_t = 30)]
    pub turn_lease_secs: u64,
    /// Seconds a detached async call may stay pending before it expires
    /// (`TOOLSERVER_ASYNC_RESULT_TTL_SECS`).
    #[arg(long, env = "TOOLSERVER_ASYNC_RESULT_TTL_SECS", default_value_t = 3600)]
    pub async_result_ttl_secs: u64,
    /// Milliseconds between looks at the job outbox when it was empty
    /// (`TOOLSERVER_CONTINUATION_POLL_MS`).
    #[arg(long, env = "TOOLSERVER_CONTINUATION_POLL_MS", default_value_t = 200)]
    pub continuation_poll_ms: u64,
    /// Milliseconds a job's claim lasts unless renewed (`TOOLSERVER_JOB_CLAIM_MS`);
    /// a process that dies loses its jobs sooner, by `TOOLSERVER_PROCESS_LIVENESS_MS`.
    #[arg(long, env = "TOOLSERVER_JOB_CLAIM_MS", default_value_t = 10_000)]
    pub job_claim_ms: u64,
    /// Milliseconds a server process may go without renewing its liveness
    /// row (it renews every third of this) before the others take it for
    /// dead: its conversations' turns are stored as interrupted and freed,
    /// and its jobs claimed again (`TOOLSERVER_PROCESS_LIVENESS_MS`).
    #[arg(long, env = "TOOLSERVER_PROCESS_LIVENESS_MS", default_value_t = 3_000)]
    pub process_liveness_ms: u64,
    /// Most detached runs one process runs at once (`TOOLSERVER_MAX_CONCURRENT_JOBS`).
    #[arg(long, env = "TOOLSERVER_MAX_CONCURRENT_JOBS", default_value_t = 64)]
    pub max_concurrent_jobs: usize,
    /// Attempts at one job before its turn fails (`TOOLSERVER_JOB_MAX_ATTEMPTS`).
    #[arg(long, env = "TOOLSERVER_JOB_MAX_ATTEMPTS", default_value_t = 5)]
    pub job_max_attempts: i32,
    /// Milliseconds a job waits when its conversation is busy (`TOOLSERVER_JOB_BUSY_BACKOFF_MS`).
    #[arg(long, env = "TOOLSERVER_JOB_BUSY_BACKOFF_MS", default_value_t = 250)]
    pub job_busy_backoff_ms: u64,
    /// Milliseconds a job waits after a failed attempt (`TOOLSERVER_JOB_RETRY_BACKOFF_MS`).
    #[arg(long, env = "TOOLSERVER_JOB_RETRY_BACKOFF_MS", default_value_t = 1_000)]
    pub job_retry_backoff_ms: u64,
    /// Milliseconds a runner may go without pinging a detached call before
    /// the call fails (`TOOLSERVER_RUNNER_LIVENESS_TIMEOUT_MS`).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_LIVENESS_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub runner_liveness_timeout_ms: u64,
    /// Milliseconds between a runner's pings of a detached call
    /// (`TOOLSERVER_RUNNER_LIVENESS_INTERVAL_MS`).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_LIVENESS_INTERVAL_MS",
        default_value_t = 2_000
    )]
    pub runner_liveness_interval_ms: u64,
    /// Milliseconds a runner keeps a detached call's outcome and tries
    /// again to deliver it while the server does not take it (it stopped
    /// answering, or answers 429/5xx) (`TOOLSERVER_COMPLETION_RETRY_MS`).
    #[arg(
        long,
        env = "TOOLSERVER_COMPLETION_RETRY_MS",
        default_value_t = 300_000
    )]
    pub completion_retry_ms: u64,
    /// Launches of one detached call that is safe to repeat, in all, before
    /// a dead runner fails it (`TOOLSERVER_MAX_CALL_LAUNCHES`).
    #[arg(long, env = "TOOLSERVER_MAX_CALL_LAUNCHES", default_value_t = 3)]
    pub max_call_launches: i32,
    /// Seconds a dispatch group may stay unsealed after its job ended before
    /// the reaper seals it (`TOOLSERVER_UNSEALED_GROUP_GRACE_SECS`).
    #[arg(
        long,
        env = "TOOLSERVER_UNSEALED_GROUP_GRACE_SECS",
        default_value_t = 30
    )]
    pub unsealed_group_grace_secs: u64,
    /// Seconds a detached turn with no job and no open group may stay
    /// unchanged before the reaper fails it (`TOOLSERVER_STUCK_TURN_GRACE_SECS`).
    #[arg(long, env = "TOOLSERVER_STUCK_TURN_GRACE_SECS", default_value_t = 60)]
    pub stuck_turn_grace_secs: u64,
    /// NATS server to take turn requests from (`TOOLSERVER_NATS_URL`; unset: no NATS).
    #[arg(long, env = "TOOLSERVER_NATS_URL")]
    pub nats_url: Option<String>,
    /// Subject of turn requests over NATS (`TOOLSERVER_NATS_SUBJECT`).
    #[arg(
        long,
        env = "TOOLSERVER_NATS_SUBJECT",
        default_value = "toolserver.turns"
    )]
    pub nats_subject: String,
    /// Where turn streams keep their chunks: `postgres`, or `nats` (NATS
    /// JetStream on the server of `TOOLSERVER_NATS_URL`, which must have
    /// JetStream on) (`TOOLSERVER_TURN_CHUNKS`; default: `nats` when
    /// `TOOLSERVER_NATS_URL` is set, else `postgres`).
    #[arg(long, env = "TOOLSERVER_TURN_CHUNKS", value_enum)]
    pub turn_chunks: Option<TurnChunks>,
    /// The JetStream stream of turn chunks, one per deployment; created or
    /// updated at start (`TOOLSERVER_NATS_STREAM`).
    #[arg(
        long,
        env = "TOOLSERVER_NATS_STREAM",
        default_value = "TOOLSERVER_TURN_CHUNKS"
    )]
    pub nats_stream: String,
    /// Prefix of the conversations' subjects in the JetStream stream, which
    /// takes `<prefix>.>` (`TOOLSERVER_NATS_CHUNK_PREFIX`).
    #[arg(
        long,
        env = "TOOLSERVER_NATS_CHUNK_PREFIX",
        default_value = "toolserver.turn-chunks"
    )]
    pub nats_chunk_prefix: String,
    /// Milliseconds between reaper passes, which expire detached calls past
    /// their deadline, fail calls whose runner went silent, seal groups left
    /// open and fail turns that cannot go on (`TOOLSERVER_ASYNC_REAPER_MS`).
    #[arg(long, env = "TOOLSERVER_ASYNC_REAPER_MS", default_value_t = 1_000)]
    pub async_reaper_ms: u64,
    /// Seconds between keep-alive comments on an idle turn stream (`TOOLSERVER_SSE_KEEPALIVE_SECS`).
    #[arg(long, env = "TOOLSERVER_SSE_KEEPALIVE_SECS", default_value_t = 15)]
    pub sse_keepalive_secs: u64,
    /// Milliseconds between a turn stream's checks of the database without
    /// a notice: a resume's look for new chunks, a running turn's look for
    /// a stop and renewal of its stream (`TOOLSERVER_STREAM_POLL_MS`).
    #[arg(long, env = "TOOLSERVER_STREAM_POLL_MS", default_value_t = 1_000)]
    pub stream_poll_ms: u64,
    /// Milliseconds a turn stream stays alive unless its server renews it:
    /// the stream of a server that died ends, with an error, this long after
    /// (`TOOLSERVER_STREAM_ALIVE_MS`; at least twice the poll).
    #[arg(long, env = "TOOLSERVER_STREAM_ALIVE_MS", default_value_t = 10_000)]
    pub stream_alive_ms: u64,
    /// Seconds a finished turn's chunks are kept for replay; the turn's
    /// message stays in the conversation (`TOOLSERVER_STREAM_RETENTION_SECS`).
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_RETENTION_SECS",
        default_value_t = 3_600
    )]
    pub stream_retention_secs: u64,
    /// Most chunks of one turn recorded in one database write (`TOOLSERVER_STREAM_MAX_BATCH`).
    #[arg(long, env = "TOOLSERVER_STREAM_MAX_BATCH", default_value_t = 256)]
    pub stream_max_batch: usize,
    /// Writers recording this process's turn streams, each writing what has
    /// queued since its last write in one statement (`TOOLSERVER_STREAM_WRITERS`).
    #[arg(long, env = "TOOLSERVER_STREAM_WRITERS", default_value_t = 2)]
    pub stream_writers: usize,
    /// Most turns' writes one statement combines (`TOOLSERVER_STREAM_MAX_GROUP`).
    #[arg(long, env = "TOOLSERVER_STREAM_MAX_GROUP", default_value_t = 128)]
    pub stream_max_group: usize,
    /// Microseconds a stream writer waits for more turns' writes after its
    /// first one while enough streams record; 0: never
    /// (`TOOLSERVER_STREAM_COMMIT_DELAY_US`).
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_COMMIT_DELAY_US",
        default_value_t = 3000
    )]
    pub stream_commit_delay_us: u64,
    /// Streams recording at once in this process from which writers wait
    /// and recorders linger before a stream's first batch too
    /// (`TOOLSERVER_STREAM_COMMIT_SIBLINGS`).
    #[arg(long, env = "TOOLSERVER_STREAM_COMMIT_SIBLINGS", default_value_t = 8)]
    pub stream_commit_siblings: usize,
    /// Microseconds a turn's recorder waits after a batch's first chunk for
    /// more of the turn's chunks, for every batch but a stream's first
    /// unless enough streams record; 0: never
    /// (`TOOLSERVER_STREAM_LINGER_US`).
    #[arg(long, env = "TOOLSERVER_STREAM_LINGER_US", default_value_t = 1000)]
    pub stream_linger_us: u64,
    /// Record turn streams; off, chunks go straight to the client and there
    /// is no resume and no stop from another connection (`TOOLSERVER_STREAM_RECORDING`).
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_RECORDING",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub stream_recording: bool,
    /// How long an HTTP resume of a detached turn that is between runs waits
    /// for its next run before answering 204; kept under the request timeout
    /// (`TOOLSERVER_STREAM_RESUME_HOLD_MS`).
    #[arg(
        long,
        env = "TOOLSERVER_STREAM_RESUME_HOLD_MS",
        default_value_t = 25_000
    )]
    pub stream_resume_hold_ms: u64,
    /// Most requests one chat WebSocket answers at once (`TOOLSERVER_WS_MAX_REQUESTS`).
    #[arg(long, env = "TOOLSERVER_WS_MAX_REQUESTS", default_value_t = 16)]
    pub ws_max_requests: usize,
}

/// Cross-origin access for browser pages on other origins.
#[derive(Debug, Clone, Args)]
pub struct CorsConfig {
    /// Origins allowed to call the API, comma-separated `scheme://host[:port]`,
    /// or `*` for any; empty (the default): none (`TOOLSERVER_CORS_ALLOWED_ORIGINS`).
    #[arg(long, env = "TOOLSERVER_CORS_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub cors_allowed_origins: Vec<String>,
    /// Methods allowed cross-origin (`TOOLSERVER_CORS_ALLOWED_METHODS`).
    #[arg(
        long,
        env = "TOOLSERVER_CORS_ALLOWED_METHODS",
        value_delimiter = ',',
        default_value = "GET,POST,PATCH,PUT,DELETE"
    )]
    pub cors_allowed_methods: Vec<String>,
    /// Request headers allowed cross-origin (`TOOLSERVER_CORS_ALLOWED_HEADERS`).
    #[arg(
        long,
        env = "TOOLSERVER_CORS_ALLOWED_HEADERS",
        value_delimiter = ',',
        default_value = "authorization,content-type,x-request-id,idempotency-key"
    )]
    pub cors_allowed_headers: Vec<String>,
    /// Let pages send credentials (cookies); the bearer token needs none, so
    /// off by default; refused with `*` (`TOOLSERVER_CORS_ALLOW_CREDENTIALS`).
    #[arg(
        long,
        env = "TOOLSERVER_CORS_ALLOW_CREDENTIALS",
        default_value_t = false
    )]
    pub cors_allow_credentials: bool,
    /// Seconds a browser may cache a preflight answer (`TOOLSERVER_CORS_MAX_AGE_SECS`).
    #[arg(long, env = "TOOLSERVER_CORS_MAX_AGE_SECS", default_value_t = 600)]
    pub cors_max_age_secs: u64,
}

/// The MCP server at `/mcp`, and agents' MCP servers.
#[derive(Debug, Clone, Args)]
pub struct McpConfig {
    /// Seconds an MCP task lives, and is kept, from its creation (`TOOLSERVER_MCP_TASK_TTL_SECS`).
    #[arg(long, env = "TOOLSERVER_MCP_TASK_TTL_SECS", default_value_t = 3600)]
    pub mcp_task_ttl_secs: u64,
    /// Longest poll interval an MCP task suggests, in milliseconds; a task
    /// suggests half its age, at least half the inline window
    /// (`TOOLSERVER_MCP_TASK_POLL_MS`).
    #[arg(long, env = "TOOLSERVER_MCP_TASK_POLL_MS", default_value_t = 1000)]
    pub mcp_task_poll_ms: u64,
    /// Milliseconds a call of a client that takes tasks may take and still
    /// answer inline; one that runs longer becomes a task (0: every such
    /// call of an uploaded tool does) (`TOOLSERVER_MCP_TASK_INLINE_MS`).
    #[arg(long, env = "TOOLSERVER_MCP_TASK_INLINE_MS", default_value_t = 250)]
    pub mcp_task_inline_ms: u64,
    /// Tools per `tools/list` page (`TOOLSERVER_MCP_PAGE_SIZE`).
    #[arg(long, env = "TOOLSERVER_MCP_PAGE_SIZE", default_value_t = 100)]
    pub mcp_page_size: u32,
    /// `Host` values `/mcp` accepts, comma-separated; empty (the default):
    /// any, since every request needs a token (`TOOLSERVER_MCP_ALLOWED_HOSTS`).
    #[arg(long, env = "TOOLSERVER_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub mcp_allowed_hosts: Vec<String>,
    /// Authorization servers the OAuth protected-resource metadata names,
    /// comma-separated http(s) URLs; empty (the default): the JWT issuer
    /// when it is an http(s) URL, else this server's public origin
    /// (`TOOLSERVER_MCP_AUTHORIZATION_SERVERS`).
    #[arg(
        long,
        env = "TOOLSERVER_MCP_AUTHORIZATION_SERVERS",
        value_delimiter = ','
    )]
    pub mcp_authorization_servers: Vec<String>,
    /// Seconds an agent keeps an MCP server's tool list before asking again
    /// (`TOOLSERVER_MCP_LIST_TTL_SECS`).
    #[arg(long, env = "TOOLSERVER_MCP_LIST_TTL_SECS", default_value_t = 60)]
    pub mcp_list_ttl_secs: u64,
}

/// What each account may use (the defaults; an operator overrides them per
/// account), and the operator routes that change them.
#[derive(Debug, Clone, Args)]
pub struct AccountsConfig {
    /// Whether requests are checked against their account's limits before
    /// work starts (`TOOLSERVER_ADMISSION`).
    #[arg(
        long,
        env = "TOOLSERVER_ADMISSION",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub admission: bool,
    /// Runner calls (direct invokes, MCP `tools/call`) an account may have in
    /// flight at once, per server process (`TOOLSERVER_ACCOUNT_CONCURRENT_CALLS`).
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_CONCURRENT_CALLS",
        default_value_t = 16
    )]
    pub account_concurrent_calls: u32,
    /// Turns (chat SSE, WebSocket) an account may have streaming at once, per
    /// server process (`TOOLSERVER_ACCOUNT_OPEN_TURNS`).
    #[arg(long, env = "TOOLSERVER_ACCOUNT_OPEN_TURNS", default_value_t = 64)]
    pub account_open_turns: u32,
    /// Detached turns (HTTP or NATS) an account may have unfinished
    /// (`TOOLSERVER_ACCOUNT_PENDING_DETACHED`).
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_PENDING_DETACHED",
        default_value_t = 256
    )]
    pub account_pending_detached: u32,
    /// Runners an account may have alive at once, per server process; a
    /// call that needs one more waits in the runner queue, then is refused
    /// (`TOOLSERVER_ACCOUNT_LIVE_RUNNERS`).
    #[arg(long, env = "TOOLSERVER_ACCOUNT_LIVE_RUNNERS", default_value_t = 8)]
    pub account_live_runners: u32,
    /// MCP tasks an account may have unsettled (`TOOLSERVER_ACCOUNT_MCP_TASKS`).
    #[arg(long, env = "TOOLSERVER_ACCOUNT_MCP_TASKS", default_value_t = 64)]
    pub account_mcp_tasks: u32,
    /// Runner calls an account may start per minute, per server process
    /// (`TOOLSERVER_ACCOUNT_CALLS_PER_MINUTE`).
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_CALLS_PER_MINUTE",
        default_value_t = 6000
    )]
    pub account_calls_per_minute: u32,
    /// Runner calls an account may start at once after a quiet spell
    /// (`TOOLSERVER_ACCOUNT_CALL_BURST`).
    #[arg(long, env = "TOOLSERVER_ACCOUNT_CALL_BURST", default_value_t = 600)]
    pub account_call_burst: u32,
    /// Turns an account may start per minute, per server process
    /// (`TOOLSERVER_ACCOUNT_TURNS_PER_MINUTE`).
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_TURNS_PER_MINUTE",
        default_value_t = 600
    )]
    pub account_turns_per_minute: u32,
    /// Turns an account may start at once after a quiet spell
    /// (`TOOLSERVER_ACCOUNT_TURN_BURST`).
    #[arg(long, env = "TOOLSERVER_ACCOUNT_TURN_BURST", default_value_t = 100)]
    pub account_turn_burst: u32,
    /// Refusals of one account a second answered at once; past them each is
    /// held until its `Retry-After` (at most `TOOLSERVER_REFUSAL_HOLD_MS`), so
    /// clients that retry without waiting cannot flood the server with
    /// refusals (`TOOLSERVER_ACCOUNT_PROMPT_REFUSALS`).
    #[arg(long, env = "TOOLSERVER_ACCOUNT_PROMPT_REFUSALS", default_value_t = 20)]
    pub account_prompt_refusals: u32,
    /// The longest a refusal is held, in milliseconds (`TOOLSERVER_REFUSAL_HOLD_MS`).
    #[arg(long, env = "TOOLSERVER_REFUSAL_HOLD_MS", default_value_t = 1000)]
    pub refusal_hold_ms: u64,
    /// How often runner CPU and egress counts are added to the accounts'
    /// stored usage, in milliseconds, at least 100; a killed server loses
    /// at most this much of its counts (`TOOLSERVER_USAGE_FLUSH_MS`).
    #[arg(
        long,
        env = "TOOLSERVER_USAGE_FLUSH_MS",
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(100..)
    )]
    pub usage_flush_ms: u64,
    /// The key of the operator routes (`/operator/...`), at least 16 bytes;
    /// unset: the routes answer 403 (`TOOLSERVER_OPERATOR_KEY`).
    #[arg(long, env = "TOOLSERVER_OPERATOR_KEY", hide_env_values = true)]
    pub operator_key: Option<String>,
    /// Whether per-account metric series carry an `account` label (one
    /// series per account: mind the cardinality) (`TOOLSERVER_METRICS_ACCOUNT_LABEL`).
    #[arg(
        long,
        env = "TOOLSERVER_METRICS_ACCOUNT_LABEL",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub metrics_account_label: bool,
}

/// One `name=ip` of `TOOLSERVER_RUNNER_EGRESS_TEST_HOSTS`.
fn parse_test_host(entry: &str) -> Result<(String, std::net::IpAddr), String> {
    let (name, ip) = entry
        .split_once('=')
        .ok_or_else(|| format!("{entry:?} is not name=ip"))?;
    let ip = ip
        .trim()
        .parse()
        .map_err(|err| format!("{entry:?}: {err}"))?;
    Ok((name.trim().to_ascii_lowercase(), ip))
}
