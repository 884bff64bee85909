//! The Kubernetes runner backend. One persistent, hardened pod per
//! reservation key (account, tool), named by the key's hash; the server
//! reaches the worker inside over the pod network behind a per-runner bearer
//! secret (`channel.rs`), or by exec where that network is out of reach,
//! with the same worker protocol and call relay as the local backend. Idle pods
//! are deleted (scale to zero) and recreated on the next call; their module
//! cache lives on a per-runner claim that outlives them. A warm pool
//! (`warm.rs`) keeps pods started ahead of demand, bound to no key until a
//! new runner claims one.

mod channel;
mod exec;
mod executor;
pub mod manifests;
mod names;
mod pod_state;
pub mod pods;
mod scripts;
mod settings;
pub mod warm;

pub use channel::PodChannel;
pub use exec::ExecStream;
pub use executor::KubernetesExecutor;
pub use names::{CHANNEL_HOST_ENV, CHANNEL_PORT_ENV, CHANNEL_SECRET_ENV};
pub use settings::{CacheVolume, KubernetesSettings, RunnerChannel, RunnerResources, SharedEgress};
use toolserver_sandbox::SandboxError;

/// A client for `config`. TLS uses the ring provider: the server links two
/// rustls providers, so one must be chosen before any client is made.
pub fn client(config: kube::Config) -> Result<kube::Client, SandboxError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    kube::Client::try_from(config)
        .map_err(|e| SandboxError::Start(format!("making a Kubernetes client: {e}")))
}

/// A client for the cluster this server runs in (its service account), or
/// the one `KUBECONFIG` names.
pub async fn cluster_client() -> Result<kube::Client, SandboxError> {
    let config = kube::Config::infer()
        .await
        .map_err(|e| SandboxError::Start(format!("finding the Kubernetes API: {e}")))?;
    client(config)
}
