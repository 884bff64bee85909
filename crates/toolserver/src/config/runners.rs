//! Where and how uploaded tools run: the backend, local runners' isolation
//! and limits, the runner caps, and call deadlines.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use toolserver_api::ApiSettings;
use toolserver_sandbox::{timings, RunnerLimits};

use super::parse::within;
use super::units::{mib, millis, secs};
use super::{EgressConfig, KubernetesConfig};

/// Which runner backend runs uploaded tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecutorKind {
    /// Local child processes (the embedded default).
    Local,
    /// One persistent pod per (account, tool) in a Kubernetes cluster.
    Kubernetes,
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

/// Where and how uploaded tools run.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Runners")]
pub struct RunnerConfig {
    /// Runner backend: `local` (child processes) or `kubernetes` (pods).
    #[arg(long, env = "TOOLSERVER_EXECUTOR", value_enum, default_value = "local")]
    pub executor: ExecutorKind,
    /// The Node.js executable that runs bundles.
    #[arg(long, env = "TOOLSERVER_NODE_BINARY", default_value = "node")]
    pub node_binary: PathBuf,
    /// Directory of local runners (home, cache, socket). Unset:
    /// `<data dir>/runners`.
    #[arg(long, env = "TOOLSERVER_RUNNER_DIR")]
    pub runner_dir: Option<PathBuf>,
    /// `auto`: bubblewrap with its own network namespace, or refuse to
    /// start, except a development server (generated development secret; no
    /// JWT secret, key, JWKS URL, issuer or audience), which starts with
    /// runners unisolated and warned about; `bwrap`: bubblewrap, or refuse
    /// to start; `none`: plain processes, no file or network boundary,
    /// warned about at start and in `GET /readyz`.
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_ISOLATION",
        value_enum,
        default_value = "auto"
    )]
    pub runner_isolation: RunnerIsolation,
    /// The bubblewrap executable that isolates local runners, looked up on
    /// `PATH` when it is a bare name.
    #[arg(long, env = "TOOLSERVER_BWRAP_BINARY", default_value = "bwrap")]
    pub bwrap_binary: PathBuf,
    /// Memory of one local runner's processes together, in MiB (a cgroup;
    /// else `RLIMIT_DATA`).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_MEMORY_MB",
        default_value_t = mib(RunnerLimits::DEFAULT.memory_bytes)
    )]
    pub runner_memory_mb: u64,
    /// Processes and threads of one local runner together (a cgroup; else
    /// `RLIMIT_NPROC`).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_PROCESSES",
        default_value_t = RunnerLimits::DEFAULT.processes
    )]
    pub runner_processes: u64,
    /// Open files per local runner process (`RLIMIT_NOFILE`).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_OPEN_FILES",
        default_value_t = RunnerLimits::DEFAULT.open_files
    )]
    pub runner_open_files: u64,
    /// Largest file a local runner may write, in MiB (`RLIMIT_FSIZE`).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_FILE_SIZE_MB",
        default_value_t = mib(RunnerLimits::DEFAULT.file_size_bytes)
    )]
    pub runner_file_size_mb: u64,
    /// Disk one local runner's directory may take, in MiB.
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_DISK_MB",
        default_value_t = mib(RunnerLimits::DEFAULT.disk_bytes)
    )]
    pub runner_disk_mb: u64,
    /// CPU time a local runner may use during one call, in milliseconds.
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_CPU_MS_PER_CALL",
        default_value_t = millis(RunnerLimits::DEFAULT.cpu_per_call)
    )]
    pub runner_cpu_ms_per_call: u64,
    /// How often a call's CPU time, disk use and cgroup counters are read,
    /// in milliseconds.
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_LIMIT_CHECK_MS",
        default_value_t = millis(RunnerLimits::DEFAULT.check_interval),
        value_parser = within::<u64>(10..)
    )]
    pub runner_limit_check_ms: u64,
    /// Seconds without calls before a runner is stopped (Kubernetes: its
    /// pod deleted).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_IDLE_SECS",
        default_value_t = secs(timings::DEFAULT_IDLE_TIMEOUT)
    )]
    pub runner_idle_secs: u64,
    /// Milliseconds a starting runner may take to listen.
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_START_TIMEOUT_MS",
        default_value_t = millis(timings::DEFAULT_START_TIMEOUT)
    )]
    pub runner_start_timeout_ms: u64,
    /// Milliseconds past a call's deadline before a silent runner is killed.
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_KILL_GRACE_MS",
        default_value_t = millis(timings::DEFAULT_KILL_GRACE)
    )]
    pub runner_kill_grace_ms: u64,
    /// Most runners live at once in this server, across all accounts. Past
    /// it, a call that needs a new runner stops the least recently used
    /// idle one, or waits for one.
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_MAX_LIVE",
        default_value_t = 32,
        value_parser = within::<u64>(1..)
    )]
    pub runner_max_live: u64,
    /// Runners started ahead of demand, so a tool's first call does not
    /// wait for one to boot: each is isolated like any runner (local: a
    /// worker process; Kubernetes: a hardened runner pod with its worker
    /// started, per server process), belongs to no account until a tool's
    /// first call claims it, and is replaced in the background. They count
    /// against `TOOLSERVER_RUNNER_MAX_LIVE` (started only into free room,
    /// discarded first when it is full). On Kubernetes a claimed pod's
    /// module cache is an emptyDir, and a tool whose cache claim exists
    /// starts cold on it. 0 starts none.
    #[arg(long, env = "TOOLSERVER_RUNNER_WARM_POOL", default_value_t = 2)]
    pub runner_warm_pool: u64,
    /// Milliseconds a call may wait for a runner when a cap is reached
    /// before it is refused.
    #[arg(long, env = "TOOLSERVER_RUNNER_QUEUE_WAIT_MS", default_value_t = 5_000)]
    pub runner_queue_wait_ms: u64,
    /// Calls of one account that may wait for a runner at once; more are
    /// refused at once.
    #[arg(long, env = "TOOLSERVER_RUNNER_QUEUE_DEPTH", default_value_t = 64)]
    pub runner_queue_depth: u64,
    /// Deadline of a tool call that names none, in milliseconds.
    #[arg(
        long,
        env = "TOOLSERVER_TOOL_TIMEOUT_MS",
        default_value_t = millis(ApiSettings::DEFAULT.default_tool_timeout)
    )]
    pub tool_timeout_ms: u64,
    /// Longest deadline a caller may ask for (`timeoutMs`), in milliseconds.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_TOOL_TIMEOUT_MS",
        default_value_t = millis(ApiSettings::DEFAULT.max_tool_timeout)
    )]
    pub max_tool_timeout_ms: u64,
    /// Largest serialized output of one call, in bytes (`OutputTooLarge`
    /// past it).
    #[arg(
        long,
        env = "TOOLSERVER_MAX_OUTPUT_BYTES",
        default_value_t = ApiSettings::DEFAULT.max_output_bytes
    )]
    pub max_output_bytes: u64,
    /// Bundles up to this size, in bytes, go to runners inline; larger ones
    /// by signed URL.
    #[arg(
        long,
        env = "TOOLSERVER_INLINE_BUNDLE_MAX_BYTES",
        default_value_t = ApiSettings::DEFAULT.inline_bundle_max_bytes
    )]
    pub inline_bundle_max_bytes: u64,
    /// Most tools a server keeps read with their input schemas compiled, so
    /// a direct call reads nothing from Postgres first; a change to a tool
    /// reaches every server by `NOTIFY`. 0 reads every call's tool.
    #[arg(
        long,
        env = "TOOLSERVER_TOOL_CACHE_ENTRIES",
        default_value_t = ApiSettings::DEFAULT.tool_cache_entries
    )]
    pub tool_cache_entries: usize,
    /// What the egress proxy lets runners reach.
    #[command(flatten)]
    pub egress: EgressConfig,
    /// Settings of the `kubernetes` executor.
    #[command(flatten)]
    pub kubernetes: KubernetesConfig,
}
