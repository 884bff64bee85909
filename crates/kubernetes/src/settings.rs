//! Settings of the Kubernetes backend; each is a server setting (see
//! `docs/configuration.md` for the variables).

use std::time::Duration;

use toolserver_sandbox::{timings, EgressKey};

/// The egress proxy runner pods share (`toolserver egress-proxy`): every
/// outbound connection of a pod goes through it, under a grant minted per
/// call.
#[derive(Debug, Clone)]
pub struct SharedEgress {
    /// `host:port` of the proxy as pods reach it (a Service name).
    pub proxy: String,
    /// The key grants are signed with; the proxy holds the same one.
    pub key: EgressKey,
}

/// Where a runner's module cache lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheVolume {
    /// One PersistentVolumeClaim per runner, kept while the runner is scaled
    /// to zero, so a resumed runner finds its modules.
    Persistent {
        /// Requested size, e.g. `1Gi`.
        size: String,
        /// Storage class; `None` uses the cluster default.
        storage_class: Option<String>,
    },
    /// An `emptyDir`, lost whenever the pod is deleted.
    Ephemeral {
        /// Size limit, e.g. `1Gi`.
        size: String,
    },
}

/// CPU and memory of one runner pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerResources {
    /// CPU request, e.g. `100m`.
    pub cpu_request: String,
    /// CPU limit, e.g. `1`.
    pub cpu_limit: String,
    /// Memory request, e.g. `128Mi`.
    pub memory_request: String,
    /// Memory limit, e.g. `512Mi`.
    pub memory_limit: String,
}

/// How the server reaches a runner pod's worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunnerChannel {
    /// Over the pod network: the worker serves HTTP on `port` of its pod IP,
    /// behind a per-runner bearer secret from the pod spec; exec only starts
    /// and stops the worker, and carries a call when the pod IP cannot be
    /// reached.
    Direct {
        /// The worker's TCP port in the pod.
        port: u16,
        /// How long opening a connection to a pod may take before the
        /// server looks the pod up again.
        connect_timeout: Duration,
    },
    /// Every request by exec through the API server (a server outside the
    /// cluster network, e.g. in development).
    Exec,
}

impl RunnerChannel {
    /// The setting's default port of the direct channel.
    pub const DEFAULT_PORT: u16 = 8790;
    /// The setting's default time to open a connection to a pod.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    /// The default: direct, on [`Self::DEFAULT_PORT`], with
    /// [`Self::DEFAULT_CONNECT_TIMEOUT`] to connect.
    pub const DEFAULT_DIRECT: Self = Self::Direct {
        port: Self::DEFAULT_PORT,
        connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
    };

    /// The worker's port when the channel is direct.
    pub fn port(&self) -> Option<u16> {
        match self {
            Self::Direct { port, .. } => Some(*port),
            Self::Exec => None,
        }
    }
}

/// How runner pods are made and used.
#[derive(Debug, Clone)]
pub struct KubernetesSettings {
    /// Namespace of the runner pods.
    pub namespace: String,
    /// Runner image: Node and the worker sources under `worker_dir`.
    pub image: String,
    /// `Always`, `IfNotPresent` or `Never`.
    pub image_pull_policy: String,
    /// Optional `runtimeClassName` (e.g. gVisor).
    pub runtime_class: Option<String>,
    /// CPU and memory.
    pub resources: RunnerResources,
    /// Size limit of the writable `/tmp`.
    pub tmp_size: String,
    /// The module cache volume.
    pub cache: CacheVolume,
    /// Non-root user and group the runner runs as.
    pub run_as_user: i64,
    /// Directory of the worker sources inside the image.
    pub worker_dir: String,
    /// The worker's unix socket inside the pod.
    pub socket_path: String,
    /// How calls reach the worker.
    pub channel: RunnerChannel,
    /// Delete a runner's pod after this long without calls (scale to zero).
    pub idle_timeout: Duration,
    /// How long a new pod may take to become ready.
    pub ready_timeout: Duration,
    /// How long the worker may take to start inside a ready pod.
    pub worker_start_timeout: Duration,
    /// Extra time past a call's deadline before a silent worker is killed.
    pub kill_grace: Duration,
    /// The NetworkPolicy that must exist in `namespace` before any runner
    /// starts; `None` skips the check.
    pub network_policy: Option<String>,
    /// The shared egress proxy; `None`: pods reach public addresses
    /// directly (as the NetworkPolicy allows) and allow lists are not
    /// enforced.
    pub egress: Option<SharedEgress>,
}

impl KubernetesSettings {
    /// The setting's default image pull policy.
    pub const DEFAULT_IMAGE_PULL_POLICY: &'static str = "IfNotPresent";
    /// The setting's default CPU request of a runner pod.
    pub const DEFAULT_CPU_REQUEST: &'static str = "100m";
    /// The setting's default CPU limit of a runner pod.
    pub const DEFAULT_CPU_LIMIT: &'static str = "1";
    /// The setting's default memory request of a runner pod.
    pub const DEFAULT_MEMORY_REQUEST: &'static str = "128Mi";
    /// The setting's default memory limit of a runner pod.
    pub const DEFAULT_MEMORY_LIMIT: &'static str = "512Mi";
    /// The setting's default size limit of a runner's `/tmp`.
    pub const DEFAULT_TMP_SIZE: &'static str = "256Mi";
    /// The setting's default size of a runner's module cache.
    pub const DEFAULT_CACHE_SIZE: &'static str = "1Gi";
    /// The setting's default time a new pod may take to become ready.
    pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(120);

    /// Settings with the defaults for all but `namespace` and `image`.
    pub fn new(namespace: impl Into<String>, image: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            image: image.into(),
            image_pull_policy: Self::DEFAULT_IMAGE_PULL_POLICY.into(),
            runtime_class: None,
            resources: RunnerResources {
                cpu_request: Self::DEFAULT_CPU_REQUEST.into(),
                cpu_limit: Self::DEFAULT_CPU_LIMIT.into(),
                memory_request: Self::DEFAULT_MEMORY_REQUEST.into(),
                memory_limit: Self::DEFAULT_MEMORY_LIMIT.into(),
            },
            tmp_size: Self::DEFAULT_TMP_SIZE.into(),
            cache: CacheVolume::Persistent {
                size: Self::DEFAULT_CACHE_SIZE.into(),
                storage_class: None,
            },
            run_as_user: 10001,
            worker_dir: "/opt/toolserver/worker".into(),
            socket_path: "/tmp/worker.sock".into(),
            channel: RunnerChannel::DEFAULT_DIRECT,
            idle_timeout: timings::DEFAULT_IDLE_TIMEOUT,
            ready_timeout: Self::DEFAULT_READY_TIMEOUT,
            worker_start_timeout: timings::DEFAULT_START_TIMEOUT,
            kill_grace: timings::DEFAULT_KILL_GRACE,
            network_policy: Some(crate::names::NETWORK_POLICY_NAME.into()),
            egress: None,
        }
    }

    /// The path of one worker script inside the image.
    pub(crate) fn script(&self, name: &str) -> String {
        format!("{}/{name}", self.worker_dir.trim_end_matches('/'))
    }
}
