//! Outbound HTTP to destinations tenants choose (model endpoints, tool APIs),
//! safe against server-side request forgery: host names are resolved by our
//! own resolver, which keeps only public addresses; IP-literal URLs, which no
//! resolver sees, are judged by [`check_url`]; redirects are not followed and
//! proxies are not used. Non-public addresses can be allowed for local models
//! and tests.

use std::error::Error;
use std::net::{IpAddr, SocketAddr};

use std::sync::Arc;
use std::time::Duration;
pub use toolserver_domain::network::is_public;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

/// Which destinations outbound requests may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboundPolicy {
    /// Allow loopback, private and other non-public addresses.
    pub allow_private: bool,
}

/// A client that connects only to addresses `policy` allows, follows no
/// redirects, ignores proxy settings (a proxy would resolve names itself) and
/// gives up connecting after `connect_timeout`. Callers must still call
/// [`check_url`] before each request.
pub fn client(
    policy: &OutboundPolicy,
    connect_timeout: Duration,
) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(connect_timeout)
        .dns_resolver(Arc::new(PublicResolver {
            allow_private: policy.allow_private,
        }))
        .build()
}

/// [`client`] for the MCP client transport, whose HTTP stack is reqwest
/// 0.13: the same resolver, no redirects, no proxies.
pub fn mcp_client(
    policy: &OutboundPolicy,
    connect_timeout: Duration,
) -> Result<reqwest_mcp::Client, reqwest_mcp::Error> {
    reqwest_mcp::Client::builder()
        .redirect(reqwest_mcp::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(connect_timeout)
        .dns_resolver(Arc::new(PublicResolver {
            allow_private: policy.allow_private,
        }))
        .build()
}

/// Refuses URLs that are not http(s), and IP-literal hosts the policy does
/// not allow (host names are judged by the resolver of [`client`]).
pub fn check_url(url: &Url, policy: &OutboundPolicy) -> Result<(), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "outbound URLs must use http or https, not {}",
            url.scheme()
        ));
    }
    let ip = match url.host() {
        Some(Host::Domain(_)) => return Ok(()),
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(Host::Ipv6(ip)) => IpAddr::V6(ip),
        None => return Err(format!("the outbound URL {url} has no host")),
    };
    if policy.allow_private || is_public(ip) {
        Ok(())
    } else {
        Err(format!("{ip} is not a public address"))
    }
}

/// [`check_url`], and for a host name, every address it resolves to now
/// must be allowed too: for destinations a tenant saves, so a private one is
/// refused when it is named rather than when it is first used. A name that
/// does not resolve (now, or within `resolve_timeout`) passes; the resolver
/// of [`client`] judges every request again.
pub async fn check_destination(
    url: &Url,
    policy: &OutboundPolicy,
    resolve_timeout: Duration,
) -> Result<(), String> {
    check_url(url, policy)?;
    let Some(Host::Domain(name)) = url.host() else {
        return Ok(());
    };
    if policy.allow_private {
        return Ok(());
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let lookup = tokio::net::lookup_host((name, port));
    let Ok(Ok(addresses)) = tokio::time::timeout(resolve_timeout, lookup).await else {
        return Ok(());
    };
    for address in addresses {
        if !is_public(address.ip()) {
            return Err(format!(
                "{name} resolves to {}, which is not a public address",
                address.ip()
            ));
        }
    }
    Ok(())
}

/// Why an answer's body was not read whole.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// It is larger than the cap.
    #[error("more than {0} bytes")]
    TooLarge(u64),
    /// It broke off.
    #[error("the answer broke off: {0}")]
    Broken(reqwest::Error),
}

/// The body of `response`, refused once it passes `cap` bytes (at once
/// when its `Content-Length` says so).
pub async fn read_capped(response: reqwest::Response, cap: u64) -> Result<Vec<u8>, BodyError> {
    use futures::StreamExt;
    if response.content_length().is_some_and(|length| length > cap) {
        return Err(BodyError::TooLarge(cap));
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(BodyError::Broken)?;
        if (body.len() + chunk.len()) as u64 > cap {
            return Err(BodyError::TooLarge(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The reason a request failed if the resolver of [`client`] refused its
/// host, `None` for any other failure.
pub fn refusal(err: &reqwest::Error) -> Option<String> {
    refused_in(err)
}

/// The refusal of the resolver anywhere in `err`'s chain of causes.
pub fn refused_in(err: &(dyn Error + 'static)) -> Option<String> {
    let mut source: Option<&(dyn Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<NonPublicHost>() {
            return Some(refused.to_string());
        }
        source = cause.source();
    }
    None
}

/// A host name with no address the policy allows.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves only to non-public addresses")]
struct NonPublicHost {
    host: String,
}

/// Resolves with the system resolver and drops the addresses the policy
/// does not allow.
struct PublicResolver {
    allow_private: bool,
}

impl PublicResolver {
    /// The addresses of `host` the policy allows; an error when none is.
    async fn allowed(
        allow_private: bool,
        host: String,
    ) -> Result<Vec<SocketAddr>, Box<dyn Error + Send + Sync>> {
        let allowed: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
            .await?
            .filter(|addr| allow_private || is_public(addr.ip()))
            .collect();
        if allowed.is_empty() {
            return Err(NonPublicHost { host }.into());
        }
        Ok(allowed)
    }
}

impl Resolve for PublicResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let lookup = Self::allowed(self.allow_private, name.as_str().to_owned());
        Box::pin(async move {
            let addrs: Addrs = Box::new(lookup.await?.into_iter());
            Ok(addrs)
        })
    }
}

impl reqwest_mcp::dns::Resolve for PublicResolver {
    fn resolve(&self, name: reqwest_mcp::dns::Name) -> reqwest_mcp::dns::Resolving {
        let lookup = Self::allowed(self.allow_private, name.as_str().to_owned());
        Box::pin(async move {
            let addrs: reqwest_mcp::dns::Addrs = Box::new(lookup.await?.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_need_http_and_a_public_ip_literal() {
        let strict = OutboundPolicy::default();
        let open = OutboundPolicy {
            allow_private: true,
        };
        let checks = [
            ("https://api.openai.com/v1", true, true),
            ("http://localhost:8080/", true, true),
            ("http://8.8.8.8/", true, true),
            ("http://127.0.0.1:8080/v1", false, true),
            ("http://2130706433/", false, true),
            ("http://0x7f.1/", false, true),
            ("http://[::1]:80/", false, true),
            ("http://[::ffff:10.0.0.1]/", false, true),
            ("http://169.254.169.254/latest/meta-data", false, true),
            ("file:///etc/passwd", false, false),
            ("ftp://example.com/", false, false),
            ("gopher://example.com/", false, false),
        ];
        for (url, strict_ok, open_ok) in checks {
            let url = Url::parse(url).unwrap();
            assert_eq!(check_url(&url, &strict).is_ok(), strict_ok, "{url}");
            assert_eq!(check_url(&url, &open).is_ok(), open_ok, "{url}");
        }
        let err = check_url(&Url::parse("http://10.0.0.1/").unwrap(), &strict).unwrap_err();
        assert_eq!(err, "10.0.0.1 is not a public address");
    }

    #[tokio::test]
    async fn names_of_private_addresses_are_refused_unless_allowed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "reached" }));
        tokio::spawn(async move { axum::serve(listener, app).await });
        let url = format!("http://localhost:{port}/");

        let strict = client(&OutboundPolicy::default(), Duration::from_secs(2)).unwrap();
        let err = strict.get(&url).send().await.unwrap_err();
        assert_eq!(
            refusal(&err).as_deref(),
            Some("localhost resolves only to non-public addresses"),
            "{err:?}"
        );

        let policy = OutboundPolicy {
            allow_private: true,
        };
        let open = client(&policy, Duration::from_secs(2)).unwrap();
        let response = open.get(&url).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await.unwrap(), "reached");
    }

    #[tokio::test]
    async fn redirects_are_not_followed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(|| async {
                axum::response::Redirect::temporary("http://169.254.169.254/")
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let policy = OutboundPolicy {
            allow_private: true,
        };
        let open = client(&policy, Duration::from_secs(2)).unwrap();
        let response = open
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 307);
    }
}
