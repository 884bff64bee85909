//! The names a runner pod is built with and read back by: its container,
//! the channel variables the worker reads, and the NetworkPolicy the
//! runner namespace must hold; and this backend's name in metrics.

/// This backend's name in metrics.
pub const BACKEND: &str = "kubernetes";

/// Name of the runner container.
pub const CONTAINER: &str = "runner";
/// Name of the NetworkPolicy the runner namespace must hold.
pub const NETWORK_POLICY_NAME: &str = "toolserver-runners";
/// The container variable naming the worker's channel port.
pub const CHANNEL_PORT_ENV: &str = "TOOLSERVER_CHANNEL_PORT";
/// The container variable holding the runner's bearer secret.
pub const CHANNEL_SECRET_ENV: &str = "TOOLSERVER_CHANNEL_SECRET";
/// The container variable with the address the worker listens on (the pod IP).
pub const CHANNEL_HOST_ENV: &str = "TOOLSERVER_CHANNEL_HOST";
