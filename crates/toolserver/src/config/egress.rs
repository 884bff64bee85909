//! What runners may reach through the egress proxy: the proxy in the server
//! for local runners, and `toolserver egress-proxy`, which Kubernetes runner
//! pods share.

use std::net::{IpAddr, SocketAddr};

use clap::Args;
use toolserver_domain::Secret;
use toolserver_sandbox::{EgressKey, EgressSettings};
use url::Url;

use super::parse::secret;
use super::units::millis;
use super::LogConfig;

/// What the runners' egress proxy lets through: the local one in the server,
/// and `toolserver egress-proxy`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Runner egress")]
pub struct EgressConfig {
    /// Let runners reach loopback, private and other non-public addresses
    /// through the egress proxy; for local development only.
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_EGRESS_ALLOW_PRIVATE",
        default_value_t = false
    )]
    pub runner_egress_allow_private: bool,
    /// Milliseconds the egress proxy may take to resolve a name, and again
    /// to connect.
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_EGRESS_TIMEOUT_MS",
        default_value_t = millis(EgressSettings::DEFAULT_TIMEOUT)
    )]
    pub runner_egress_timeout_ms: u64,
    /// For tests only: `name=ip` pairs the egress proxy answers instead of
    /// DNS, and treats as public.
    #[arg(long, env = "TOOLSERVER_RUNNER_EGRESS_TEST_HOSTS", value_parser = parse_test_host, value_delimiter = ',')]
    pub runner_egress_test_hosts: Vec<(String, IpAddr)>,
}

/// Settings of `toolserver egress-proxy`, the proxy Kubernetes runner pods
/// share.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Egress proxy")]
pub struct EgressProxyConfig {
    /// Address and port to listen on.
    #[arg(long, env = "TOOLSERVER_EGRESS_LISTEN", default_value = "0.0.0.0:3128")]
    pub listen: SocketAddr,
    /// The key egress grants are signed with, shared with the servers.
    #[arg(
        long,
        env = "TOOLSERVER_EGRESS_TOKEN_KEY",
        hide_env_values = true,
        value_parser = secret(EgressKey::MIN_LEN)
    )]
    pub egress_token_key: Secret,
    /// The servers' public base URL: its job callbacks are forwarded even
    /// when it is a cluster address.
    #[arg(long, env = "TOOLSERVER_PUBLIC_URL")]
    pub public_url: Option<Url>,
    /// What the proxy lets through.
    #[command(flatten)]
    pub egress: EgressConfig,
    /// Logs and traces.
    #[command(flatten)]
    pub log: LogConfig,
}

/// One `name=ip` of `TOOLSERVER_RUNNER_EGRESS_TEST_HOSTS`.
fn parse_test_host(entry: &str) -> Result<(String, IpAddr), String> {
    let (name, ip) = entry
        .split_once('=')
        .ok_or_else(|| format!("{entry:?} is not name=ip"))?;
    let ip = ip
        .trim()
        .parse()
        .map_err(|err| format!("{entry:?}: {err}"))?;
    Ok((name.trim().to_ascii_lowercase(), ip))
}
