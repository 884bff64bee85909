//! Where one `CONNECT` may go: a host outside the tool's allow list is
//! refused (the server's own origin and its bundle URLs excepted); the rest
//! is resolved here (a test override, an IP literal, or DNS), and the answer
//! decides between a plain tunnel, an inspected tunnel (callbacks and
//! bundles only) and a refusal.

use std::net::{IpAddr, SocketAddr};

use hyper::body::Incoming;
use hyper::{Method, Request};
use toolserver_domain::network::is_public;
use url::{Host, Url};

use super::{EgressScope, EgressSettings};

/// How a tunnel is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// Bytes both ways: a public destination.
    Tunnel,
    /// HTTP served inside, only callback and bundle requests forwarded: the
    /// server's own origin or its bundle store on a non-public address.
    Inspect,
}

/// Decides `host:port` for `scope`: the route and the address to connect to,
/// or why not.
pub(super) async fn route(
    settings: &EgressSettings,
    scope: &EgressScope,
    host: &str,
    port: u16,
) -> Result<(Route, SocketAddr), String> {
    let serves_the_server = settings
        .callback_base
        .as_ref()
        .is_some_and(|base| same_origin(base, host, port))
        || scope.admits_origin(host, port);
    if !serves_the_server && !scope.allows_host(host) {
        return Err(format!("{host} is not in the tool's egress allow list"));
    }
    if let Some(&ip) = settings.resolve_overrides.get(&host.to_ascii_lowercase()) {
        return Ok((Route::Tunnel, SocketAddr::new(ip, port)));
    }
    let addresses = resolve(settings, host, port).await?;
    let Some(&first) = addresses.first() else {
        return Err(format!("{host} has no address"));
    };
    let private = addresses.iter().find(|address| !is_public(address.ip()));
    let Some(private) = private.filter(|_| !settings.allow_private) else {
        return Ok((Route::Tunnel, first));
    };
    if serves_the_server {
        return Ok((Route::Inspect, first));
    }
    if host.parse::<IpAddr>().is_ok() {
        Err(format!("{host} is not a public address"))
    } else {
        Err(format!(
            "{host} resolves to {}, which is not a public address",
            private.ip()
        ))
    }
}

/// The addresses of `host`: itself if it is an IP literal, else from DNS
/// within the resolve timeout.
async fn resolve(
    settings: &EgressSettings,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let lookup = tokio::net::lookup_host((host, port));
    match tokio::time::timeout(settings.resolve_timeout, lookup).await {
        Ok(Ok(addresses)) => Ok(addresses.collect()),
        Ok(Err(err)) => Err(format!("{host} does not resolve: {err}")),
        Err(_) => Err(format!("resolving {host} timed out")),
    }
}

/// Refuses a request inside an inspected tunnel to `host:port` unless it is
/// a callback to the server (`POST <callback base>sandbox-jobs/{id}/complete|heartbeat`,
/// or `POST <callback base>runner/fetch`, a tool's `ctx.fetch`) or a `GET`
/// of an admitted bundle URL.
pub(super) fn admit_request(
    settings: &EgressSettings,
    scope: &EgressScope,
    host: &str,
    port: u16,
    request: &Request<Incoming>,
) -> Result<(), String> {
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str());
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let url = Url::parse(&format!("http://{authority}{path}"))
        .map_err(|err| format!("unreadable request target {path}: {err}"))?;
    let callback = settings
        .callback_base
        .as_ref()
        .filter(|base| same_origin(base, host, port))
        .is_some_and(|base| is_server_callback(base, &url));
    if (request.method() == Method::POST && callback)
        || (request.method() == Method::GET && scope.admits(&url))
    {
        return Ok(());
    }
    Err(format!(
        "{} {} is neither a callback to the server nor a bundle this runner was sent",
        request.method(),
        url.path()
    ))
}

/// Whether `url` is `<base>sandbox-jobs/<id>/complete` or `…/heartbeat`,
/// or `<base>runner/fetch`.
fn is_server_callback(base: &Url, url: &Url) -> bool {
    let Some(rest) = url.path().strip_prefix(base.path()) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    url.query().is_none()
        && (matches!(parts.as_slice(), ["sandbox-jobs", id, "complete" | "heartbeat"] if !id.is_empty())
            || parts.as_slice() == ["runner", "fetch"])
}

/// Whether `url` is served at `host:port`.
pub(super) fn same_origin(url: &Url, host: &str, port: u16) -> bool {
    let url_host = match url.host() {
        Some(Host::Domain(name)) => name.to_ascii_lowercase(),
        Some(Host::Ipv4(ip)) => ip.to_string(),
        Some(Host::Ipv6(ip)) => ip.to_string(),
        None => return false,
    };
    let host = match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host.to_ascii_lowercase(),
    };
    url.scheme() == "http" && url.port_or_known_default() == Some(port) && url_host == host
}

/// A `CONNECT` authority's host without IPv6 brackets.
pub(super) fn bare_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_callbacks_are_the_two_routes_under_the_base() {
        let base = Url::parse("http://127.0.0.1:8080/api/").unwrap();
        let at = |path: &str| Url::parse(&format!("http://127.0.0.1:8080{path}")).unwrap();
        assert!(is_server_callback(
            &base,
            &at("/api/sandbox-jobs/abc/complete")
        ));
        assert!(is_server_callback(
            &base,
            &at("/api/sandbox-jobs/abc/heartbeat")
        ));
        assert!(!is_server_callback(
            &base,
            &at("/api/sandbox-jobs//complete")
        ));
        assert!(!is_server_callback(
            &base,
            &at("/api/sandbox-jobs/abc/complete?x=1")
        ));
        assert!(!is_server_callback(&base, &at("/api/agents")));
        assert!(!is_server_callback(
            &base,
            &at("/sandbox-jobs/abc/complete")
        ));
        assert!(!is_server_callback(
            &base,
            &at("/api/sandbox-jobs/a/b/complete")
        ));
    }

    #[test]
    fn origins_compare_hosts_ports_and_ip_spellings() {
        let url = Url::parse("http://[::1]:9000/x").unwrap();
        assert!(same_origin(&url, "::1", 9000));
        assert!(same_origin(&url, "0:0:0:0:0:0:0:1", 9000));
        assert!(!same_origin(&url, "::1", 9001));
        let named = Url::parse("http://Bundles.Example/x").unwrap();
        assert!(same_origin(&named, "bundles.example", 80));
        let secure = Url::parse("https://bundles.example/x").unwrap();
        assert!(!same_origin(&secure, "bundles.example", 443));
    }
}
