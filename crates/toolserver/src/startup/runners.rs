//! The runner backend, held to the runner budget: local child processes
//! (isolated as [`runner_isolation`] decides) or Kubernetes pods.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use toolserver_kubernetes::KubernetesExecutor;
use toolserver_sandbox::{
    AccountRunnerCaps, BudgetSettings, EgressSettings, Executor, LocalExecutor, LocalSettings,
    RunnerBudget, RunnerLimits,
};
use url::Url;

use super::kubernetes;
use crate::config::units::MIB;
use crate::config::{DatabaseConfig, EgressConfig, ExecutorKind, RunnerConfig};
use crate::runner_isolation;

/// The configured runner backend, held to the runner budget, its warm pool
/// (started) and its idle reaper; `development` lets local runners go
/// unisolated under `auto` (see [`runner_isolation`]).
pub(super) async fn executor(
    config: &RunnerConfig,
    db: &DatabaseConfig,
    public_url: &Url,
    development: bool,
    caps: Arc<dyn AccountRunnerCaps>,
) -> anyhow::Result<(Arc<dyn Executor>, WarmPool, tokio::task::JoinHandle<()>)> {
    let (backend, pool, reaper) = backend(config, db, public_url, development).await?;
    let budget = RunnerBudget::new(backend, budget_settings(config), caps);
    // After the budget holds the backend: warm runners count against it.
    pool.start(count(config.runner_warm_pool))?;
    Ok((Arc::new(budget), pool, reaper))
}

/// The backend as itself, for its warm pool.
pub(super) enum WarmPool {
    /// Warm worker processes.
    Local(LocalExecutor),
    /// Warm runner pods.
    Kubernetes(KubernetesExecutor),
}

impl WarmPool {
    /// Keeps `size` warm runners from now on.
    fn start(&self, size: usize) -> anyhow::Result<()> {
        match self {
            Self::Local(local) => local
                .start_warm_pool(size)
                .context("starting the warm runner pool"),
            Self::Kubernetes(kubernetes) => {
                kubernetes.start_warm_pool(size);
                Ok(())
            }
        }
    }

    /// Gives back the warm runners of a server that is stopping: warm pods
    /// are deleted; warm worker processes die with this process (their
    /// parent-death signal), and the next start sweeps what they held.
    pub(super) async fn stop(&self) {
        if let Self::Kubernetes(kubernetes) = self {
            kubernetes.stop_warm_pool().await;
        }
    }
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

/// The configured runner backend (also as itself, for its warm pool) and
/// its idle reaper.
async fn backend(
    config: &RunnerConfig,
    db: &DatabaseConfig,
    public_url: &Url,
    development: bool,
) -> anyhow::Result<(Arc<dyn Executor>, WarmPool, tokio::task::JoinHandle<()>)> {
    Ok(match config.executor {
        ExecutorKind::Local => {
            let executor = local_executor(config, db, public_url, development)?;
            let reaper = executor.spawn_reaper();
            (
                Arc::new(executor.clone()),
                WarmPool::Local(executor),
                reaper,
            )
        }
        ExecutorKind::Kubernetes => {
            let settings = kubernetes::settings(config)?;
            let client = toolserver_kubernetes::cluster_client().await?;
            let executor = KubernetesExecutor::new(client, settings)
                .await
                .context("starting the kubernetes runner backend")?;
            let reaper = executor.spawn_reaper();
            (
                Arc::new(executor.clone()),
                WarmPool::Kubernetes(executor),
                reaper,
            )
        }
    })
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
pub(super) fn egress_settings(config: &EgressConfig, callback_base: Option<Url>) -> EgressSettings {
    let timeout = Duration::from_millis(config.runner_egress_timeout_ms);
    EgressSettings {
        allow_private: config.runner_egress_allow_private,
        resolve_overrides: config.runner_egress_test_hosts.iter().cloned().collect(),
        callback_base,
        resolve_timeout: timeout,
        connect_timeout: timeout,
    }
}

/// The local runners' resource limits from the settings.
fn runner_limits(config: &RunnerConfig) -> RunnerLimits {
    RunnerLimits {
        memory_bytes: config.runner_memory_mb.saturating_mul(MIB),
        processes: config.runner_processes,
        open_files: config.runner_open_files,
        file_size_bytes: config.runner_file_size_mb.saturating_mul(MIB),
        disk_bytes: config.runner_disk_mb.saturating_mul(MIB),
        cpu_per_call: Duration::from_millis(config.runner_cpu_ms_per_call),
        check_interval: Duration::from_millis(config.runner_limit_check_ms),
    }
}
