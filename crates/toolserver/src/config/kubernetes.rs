//! Settings of the `kubernetes` executor: runner pods, their resources and
//! cache, and how the server reaches them.

use clap::{Args, ValueEnum};
use toolserver_domain::Secret;
use toolserver_kubernetes::manifests::NETWORK_POLICY_NAME;
use toolserver_kubernetes::{KubernetesSettings, RunnerChannel};
use toolserver_sandbox::EgressKey;

use super::parse::secret;
use super::units::{millis, secs};

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

/// Settings of the `kubernetes` executor. The cluster connection is
/// inferred: the in-cluster service account, else `KUBECONFIG`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Kubernetes runners")]
pub struct KubernetesConfig {
    /// Namespace of runner pods.
    #[arg(
        long,
        env = "TOOLSERVER_K8S_NAMESPACE",
        default_value = "toolserver-runners"
    )]
    pub k8s_namespace: String,
    /// Runner image: Node and the worker (`deploy/runner.Dockerfile`).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_RUNNER_IMAGE",
        default_value = "toolserver-runner:dev"
    )]
    pub k8s_runner_image: String,
    /// Image pull policy of runner pods.
    #[arg(
        long,
        env = "TOOLSERVER_K8S_IMAGE_PULL_POLICY",
        default_value = KubernetesSettings::DEFAULT_IMAGE_PULL_POLICY,
        value_parser = ["Always", "IfNotPresent", "Never"]
    )]
    pub k8s_image_pull_policy: String,
    /// `runtimeClassName` of runner pods, e.g. `gvisor`.
    #[arg(long, env = "TOOLSERVER_K8S_RUNTIME_CLASS")]
    pub k8s_runtime_class: Option<String>,
    /// CPU request per runner pod.
    #[arg(
        long,
        env = "TOOLSERVER_K8S_CPU_REQUEST",
        default_value = KubernetesSettings::DEFAULT_CPU_REQUEST
    )]
    pub k8s_cpu_request: String,
    /// CPU limit per runner pod.
    #[arg(
        long,
        env = "TOOLSERVER_K8S_CPU_LIMIT",
        default_value = KubernetesSettings::DEFAULT_CPU_LIMIT
    )]
    pub k8s_cpu_limit: String,
    /// Memory request per runner pod.
    #[arg(
        long,
        env = "TOOLSERVER_K8S_MEMORY_REQUEST",
        default_value = KubernetesSettings::DEFAULT_MEMORY_REQUEST
    )]
    pub k8s_memory_request: String,
    /// Memory limit per runner pod.
    #[arg(
        long,
        env = "TOOLSERVER_K8S_MEMORY_LIMIT",
        default_value = KubernetesSettings::DEFAULT_MEMORY_LIMIT
    )]
    pub k8s_memory_limit: String,
    /// Size limit of a runner's writable `/tmp`.
    #[arg(
        long,
        env = "TOOLSERVER_K8S_TMP_SIZE",
        default_value = KubernetesSettings::DEFAULT_TMP_SIZE
    )]
    pub k8s_tmp_size: String,
    /// The module cache: `persistent` (a claim per runner, kept while it is
    /// scaled to zero) or `ephemeral` (an `emptyDir`, lost with the pod).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_CACHE_VOLUME",
        value_enum,
        default_value = "persistent"
    )]
    pub k8s_cache_volume: CacheVolumeKind,
    /// Size of a runner's module cache.
    #[arg(
        long,
        env = "TOOLSERVER_K8S_CACHE_SIZE",
        default_value = KubernetesSettings::DEFAULT_CACHE_SIZE
    )]
    pub k8s_cache_size: String,
    /// Storage class of cache claims. Unset: the cluster default.
    #[arg(long, env = "TOOLSERVER_K8S_CACHE_STORAGE_CLASS")]
    pub k8s_cache_storage_class: Option<String>,
    /// Seconds a new runner pod may take to become ready.
    #[arg(
        long,
        env = "TOOLSERVER_K8S_POD_READY_TIMEOUT_SECS",
        default_value_t = secs(KubernetesSettings::DEFAULT_READY_TIMEOUT)
    )]
    pub k8s_pod_ready_timeout_secs: u64,
    /// NetworkPolicy that must exist in the runner namespace before the
    /// server starts; empty skips the check.
    #[arg(
        long,
        env = "TOOLSERVER_K8S_NETWORK_POLICY",
        default_value = NETWORK_POLICY_NAME
    )]
    pub k8s_network_policy: String,
    /// How the server reaches a runner's worker: `direct` (its port on the
    /// pod network, behind a per-runner secret) or `exec` (every request
    /// through the API server, e.g. for a server outside the cluster
    /// network).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_CHANNEL",
        value_enum,
        default_value = "direct"
    )]
    pub k8s_channel: ChannelKind,
    /// The worker's TCP port on the pod network (the shipped NetworkPolicy
    /// admits the server on 8790).
    #[arg(
        long,
        env = "TOOLSERVER_K8S_CHANNEL_PORT",
        default_value_t = RunnerChannel::DEFAULT_PORT
    )]
    pub k8s_channel_port: u16,
    /// Milliseconds opening a connection to a runner pod may take before the
    /// pod is looked up again.
    #[arg(
        long,
        env = "TOOLSERVER_K8S_CHANNEL_CONNECT_MS",
        default_value_t = millis(RunnerChannel::DEFAULT_CONNECT_TIMEOUT)
    )]
    pub k8s_channel_connect_ms: u64,
    /// `host:port` of the egress proxy runner pods share (`toolserver
    /// egress-proxy`). Unset: pods reach public addresses directly and
    /// per-tool allow lists are not enforced.
    #[arg(long, env = "TOOLSERVER_K8S_EGRESS_PROXY")]
    pub k8s_egress_proxy: Option<String>,
    /// The key egress grants are signed with, shared with `toolserver
    /// egress-proxy`; required with `TOOLSERVER_K8S_EGRESS_PROXY`.
    #[arg(
        long,
        env = "TOOLSERVER_EGRESS_TOKEN_KEY",
        hide_env_values = true,
        value_parser = secret(EgressKey::MIN_LEN)
    )]
    pub egress_token_key: Option<Secret>,
}
