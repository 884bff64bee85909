//! The direct channel to a runner pod's worker: HTTP/1.1 over TCP to the
//! pod's IP, every request carrying the runner's bearer secret. The secret
//! is made when the pod is created and lives in its spec (the worker reads
//! it from its environment and removes it before any tool code loads), so
//! every server replica learns a pod's channel from one read of the pod, and
//! a pod that was replaced (new address, new secret) refuses a stale one.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use rand::RngCore;
use tokio::net::TcpStream;
use toolserver_sandbox::{SandboxError, WorkerConnection};

use crate::names::{CHANNEL_PORT_ENV, CHANNEL_SECRET_ENV, CONTAINER};

/// Random bytes in a runner secret.
const SECRET_BYTES: usize = 32;

/// Where one pod's worker listens, and the secret it wants.
#[derive(Clone, PartialEq, Eq)]
pub struct PodChannel {
    address: SocketAddr,
    secret: String,
}

impl fmt::Debug for PodChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PodChannel")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl PodChannel {
    /// A fresh runner secret: 32 random bytes, hex.
    pub fn new_secret() -> String {
        let mut bytes = [0u8; SECRET_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        hex::encode(bytes)
    }

    /// The channel `pod` offers: its IP with the port and secret of its
    /// runner container's spec; `None` before it has an IP, or when its spec
    /// has no channel (made by a server using exec).
    pub fn of(pod: &Pod) -> Option<Self> {
        let ip: IpAddr = pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
        let container = pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .find(|container| container.name == CONTAINER)?;
        let value = |name: &str| {
            container
                .env
                .iter()
                .flatten()
                .find(|var| var.name == name)
                .and_then(|var| var.value.clone())
        };
        let port: u16 = value(CHANNEL_PORT_ENV)?.parse().ok()?;
        let secret = value(CHANNEL_SECRET_ENV)?;
        Some(Self {
            address: SocketAddr::new(ip, port),
            secret,
        })
    }

    /// The worker's address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// A new connection to the worker, opened within `timeout`.
    pub async fn connect(&self, timeout: Duration) -> Result<WorkerConnection, SandboxError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(self.address))
            .await
            .map_err(|_| {
                SandboxError::Transport(format!(
                    "connecting to {} took over {} ms",
                    self.address,
                    timeout.as_millis()
                ))
            })?
            .map_err(|e| SandboxError::Transport(format!("connecting to {}: {e}", self.address)))?;
        stream.set_nodelay(true)?;
        WorkerConnection::handshake_bearer(stream, &self.secret).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ip: Option<&str>, env: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "r"},
            "spec": {"containers": [{"name": CONTAINER, "env": env}]},
            "status": {"podIP": ip},
        }))
        .expect("a pod")
    }

    #[test]
    fn a_pod_offers_its_ip_with_the_port_and_secret_of_its_spec() {
        let env = json!([
            {"name": CHANNEL_PORT_ENV, "value": "8790"},
            {"name": CHANNEL_SECRET_ENV, "value": "s3cret"},
        ]);
        let channel = PodChannel::of(&pod(Some("10.1.2.3"), env.clone())).expect("a channel");
        assert_eq!(channel.address(), "10.1.2.3:8790".parse().expect("address"));
        assert!(!format!("{channel:?}").contains("s3cret"));
        assert_eq!(PodChannel::of(&pod(None, env)), None);
        let exec_only = json!([{"name": "HOME", "value": "/tmp"}]);
        assert_eq!(PodChannel::of(&pod(Some("10.1.2.3"), exec_only)), None);
    }

    #[test]
    fn secrets_are_long_and_fresh() {
        let (a, b) = (PodChannel::new_secret(), PodChannel::new_secret());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
