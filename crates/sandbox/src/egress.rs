//! The runners' egress proxy. An isolated local runner has a network
//! namespace of its own holding nothing but loopback; its one way out is
//! this proxy, served on a unix socket in the runner's directory
//! (`egress.sock`, see [`EgressProxy::serve`]).
//!
//! Every request is `CONNECT host:port` (the worker routes `fetch`, and the
//! clients that honour `HTTP(S)_PROXY`, through it). The proxy resolves the
//! host itself ([`route`]) and:
//! - tunnels to the checked address when every answer is public unicast;
//! - for the server's own job-callback origin, and the origin of a bundle URL
//!   the runner was handed ([`EgressScope::admit`]), serves HTTP inside the
//!   tunnel and forwards only those requests (`POST
//!   …/sandbox-jobs/{id}/complete|heartbeat`, `POST …/runner/fetch`, `GET`
//!   of the exact bundle URL);
//! - refuses anything else with `403` and the reason as the body, logged
//!   with the runner, account and tool.
//!
//! The proxy follows no redirects: a tunnel carries bytes, and a forwarded
//! response goes back as it came.
//!
//! The bytes every tunnel carries, both ways, are counted per account
//! ([`EgressProxy::egress_bytes`]).
//!
//! Runners outside this process (Kubernetes pods) share one proxy served on
//! TCP ([`EgressProxy::serve_shared`], the `toolserver egress-proxy`
//! command): there every `CONNECT` carries a signed [`EgressGrant`] in
//! `Proxy-Authorization: Bearer …`, which stands for the scope.

mod counted;
mod grant;
mod route;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use toolserver_domain::EgressAllowList;
use url::Url;

use counted::Counted;
pub use grant::{EgressGrant, EgressKey};
use route::Route;

use crate::meter::AccountMeter;

/// Settings of the egress proxy; each is a server setting.
#[derive(Debug, Clone)]
pub struct EgressSettings {
    /// Let runners reach loopback, private and other non-public addresses
    /// (local development only).
    pub allow_private: bool,
    /// Names answered from this table instead of DNS, and treated as public
    /// (for tests: a public-looking name served on loopback).
    pub resolve_overrides: HashMap<String, IpAddr>,
    /// The server's public base URL, under which the job callbacks live.
    pub callback_base: Option<Url>,
    /// How long resolving a name may take.
    pub resolve_timeout: Duration,
    /// How long connecting to a destination may take.
    pub connect_timeout: Duration,
}

impl EgressSettings {
    /// The setting's default time to resolve a name, and again to connect.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
}

impl Default for EgressSettings {
    /// Public addresses only, no callbacks, [`Self::DEFAULT_TIMEOUT`] to
    /// resolve and to connect.
    fn default() -> Self {
        Self {
            allow_private: false,
            resolve_overrides: HashMap::new(),
            callback_base: None,
            resolve_timeout: Self::DEFAULT_TIMEOUT,
            connect_timeout: Self::DEFAULT_TIMEOUT,
        }
    }
}

/// Serves every isolated runner's egress socket.
#[derive(Clone)]
pub struct EgressProxy {
    settings: Arc<EgressSettings>,
    /// Bytes carried, per account.
    carried: AccountMeter,
}

/// Whose traffic one runner's socket carries, and the bundle URLs it was
/// handed.
#[derive(Clone)]
pub struct EgressScope {
    runner: String,
    account: String,
    tool: String,
    admitted: Arc<Mutex<HashMap<Url, Instant>>>,
    /// The tool's allow list as of its latest call; `None`: any public host.
    allow: Arc<Mutex<Option<EgressAllowList>>>,
}

impl EgressScope {
    /// The scope of `runner`, serving `account`'s `tool`.
    pub fn new(runner: &str, account: &str, tool: &str) -> Self {
        Self {
            runner: runner.to_owned(),
            account: account.to_owned(),
            tool: tool.to_owned(),
            admitted: Arc::default(),
            allow: Arc::default(),
        }
    }

    /// Narrows (or, with `None`, widens back) the hosts the tool may reach:
    /// each call brings the tool's current allow list.
    pub fn restrict(&self, allow: Option<EgressAllowList>) {
        *self.allow.lock().unwrap_or_else(PoisonError::into_inner) = allow;
    }

    /// The scope a verified grant stands for, its bundle URLs admitted for
    /// the `left` lifetime of the grant.
    fn of_grant(grant: EgressGrant, left: Duration) -> Self {
        let scope = Self::new(&grant.runner, &grant.account, &grant.tool);
        scope.restrict(grant.allow);
        for url in &grant.admit {
            scope.admit(url, left);
        }
        scope
    }

    /// Whether the tool's allow list (if any) admits `host`.
    fn allows_host(&self, host: &str) -> bool {
        self.allow
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_none_or(|allow| allow.allows(host))
    }

    /// Lets the runner `GET` exactly `url` (a bundle URL the server signed)
    /// for `ttl`, whatever its address.
    pub fn admit(&self, url: &str, ttl: Duration) {
        let Ok(url) = Url::parse(url) else { return };
        let now = Instant::now();
        let mut admitted = self.admitted_urls();
        admitted.retain(|_, until| *until > now);
        admitted.insert(url, now + ttl);
    }

    fn admitted_urls(&self) -> std::sync::MutexGuard<'_, HashMap<Url, Instant>> {
        self.admitted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `url` was admitted and has not expired.
    fn admits(&self, url: &Url) -> bool {
        self.admitted_urls()
            .get(url)
            .is_some_and(|until| *until > Instant::now())
    }

    /// Whether some admitted URL lives at `host:port`.
    fn admits_origin(&self, host: &str, port: u16) -> bool {
        self.admitted_urls()
            .keys()
            .any(|url| route::same_origin(url, host, port))
    }
}

type ProxyBody = BoxBody<Bytes, hyper::Error>;

impl EgressProxy {
    /// A proxy with `settings`.
    pub fn new(settings: EgressSettings) -> Self {
        Self {
            settings: Arc::new(settings),
            carried: AccountMeter::default(),
        }
    }

    /// Bytes this proxy carried for `account`'s runners since it started,
    /// both ways (tunnels and forwarded requests alike).
    pub fn egress_bytes(&self, account: &str) -> u64 {
        self.carried.read(account)
    }

    /// Listens on `socket` for `scope`'s runner until the returned task is
    /// aborted; the socket is made connectable by `owner` (uid, gid) only.
    pub fn serve(
        &self,
        socket: &Path,
        scope: EgressScope,
        owner: Option<(u32, u32)>,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        use std::os::unix::fs::PermissionsExt;
        match std::fs::remove_file(socket) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
            _ => {}
        }
        let listener = UnixListener::bind(socket)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(socket, Some(uid), Some(gid))?;
        }
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
        let proxy = self.clone();
        Ok(tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(proxy.clone().serve_connection(scope.clone(), stream));
            }
        }))
    }

    /// Listens on `listener` for runners of any scope until the returned task
    /// is aborted: each `CONNECT` must carry a grant signed with `key`.
    pub fn serve_shared(
        &self,
        listener: TcpListener,
        key: EgressKey,
    ) -> tokio::task::JoinHandle<()> {
        let (proxy, key) = (self.clone(), Arc::new(key));
        tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(err) => {
                        tracing::warn!(error = %err, "egress proxy: accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (proxy, key) = (proxy.clone(), key.clone());
                let handle = move |request| {
                    let (proxy, key) = (proxy.clone(), key.clone());
                    async move {
                        match authorize(&key, &request) {
                            Ok(scope) => proxy.connect(&scope, request).await,
                            Err(reason) => unauthorized(&reason),
                        }
                    }
                };
                tokio::spawn(serve_http(stream, handle));
            }
        })
    }

    async fn serve_connection<S>(self, scope: EgressScope, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let handle = move |request| {
            let (proxy, scope) = (self.clone(), scope.clone());
            async move { proxy.connect(&scope, request).await }
        };
        serve_http(stream, handle).await;
    }

    /// Answers one `CONNECT`.
    async fn connect(
        &self,
        scope: &EgressScope,
        request: Request<Incoming>,
    ) -> Response<ProxyBody> {
        if request.method() != Method::CONNECT {
            return answer(
                StatusCode::METHOD_NOT_ALLOWED,
                "the egress proxy takes CONNECT host:port only",
            );
        }
        let Some((host, port)) = request.uri().authority().and_then(|authority| {
            Some((route::bare_host(authority.host()), authority.port_u16()?))
        }) else {
            return answer(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
        };
        let decided = route::route(&self.settings, scope, &host, port).await;
        let (route, address) = match decided {
            Ok(decided) => decided,
            Err(reason) => return self.refuse(scope, &host, port, reason),
        };
        let upstream =
            match tokio::time::timeout(self.settings.connect_timeout, TcpStream::connect(address))
                .await
            {
                Ok(Ok(upstream)) => upstream,
                Ok(Err(err)) => {
                    return answer(
                        StatusCode::BAD_GATEWAY,
                        &format!("connecting to {host}:{port}: {err}"),
                    )
                }
                Err(_) => {
                    return answer(
                        StatusCode::GATEWAY_TIMEOUT,
                        &format!("connecting to {host}:{port} timed out"),
                    )
                }
            };
        let (proxy, scope) = (self.clone(), scope.clone());
        let carried = self.carried.of(&scope.account);
        tokio::spawn(async move {
            let Ok(upgraded) = hyper::upgrade::on(request).await else {
                return;
            };
            let mut tunnel = Counted::new(TokioIo::new(upgraded), carried);
            match route {
                Route::Tunnel => {
                    let mut upstream = upstream;
                    let _ = tokio::io::copy_bidirectional(&mut tunnel, &mut upstream).await;
                }
                Route::Inspect => proxy.inspect(scope, host, port, tunnel, upstream).await,
            }
        });
        answer(StatusCode::OK, "")
    }

    /// Serves HTTP inside a tunnel to a non-public origin the runner may use
    /// for callbacks and bundles only, forwarding just those requests over
    /// `upstream`. When the origin closes that connection (the server
    /// restarted), the next request is sent over a new one to the same
    /// address, so a long-lived runner's callbacks reach the new process.
    async fn inspect(
        self,
        scope: EgressScope,
        host: String,
        port: u16,
        tunnel: Counted<TokioIo<hyper::upgrade::Upgraded>>,
        upstream: TcpStream,
    ) {
        let Ok(address) = upstream.peer_addr() else {
            return;
        };
        let mut origin = Origin {
            address,
            connect_timeout: self.settings.connect_timeout,
            sender: None,
        };
        if origin.attach(upstream).await.is_err() {
            return;
        }
        let origin = Arc::new(tokio::sync::Mutex::new(origin));
        let service = service_fn(move |request: Request<Incoming>| {
            let (proxy, scope, host, origin) =
                (self.clone(), scope.clone(), host.clone(), origin.clone());
            async move {
                if let Err(reason) =
                    route::admit_request(&proxy.settings, &scope, &host, port, &request)
                {
                    return Ok::<_, Infallible>(proxy.refuse(&scope, &host, port, reason));
                }
                let forwarded = origin.lock().await.forward(request).await;
                Ok(match forwarded {
                    Ok(response) => response.map(BodyExt::boxed),
                    Err(err) => answer(
                        StatusCode::BAD_GATEWAY,
                        &format!("forwarding to {host}:{port}: {err}"),
                    ),
                })
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tunnel), service)
            .await;
    }

    /// Logs a refused destination and answers `403` with the reason.
    fn refuse(
        &self,
        scope: &EgressScope,
        host: &str,
        port: u16,
        reason: String,
    ) -> Response<ProxyBody> {
        tracing::warn!(
            runner = %scope.runner,
            account = %scope.account,
            tool = %scope.tool,
            host,
            port,
            %reason,
            "runner egress refused"
        );
        answer(
            StatusCode::FORBIDDEN,
            &format!("egress to {host}:{port} refused: {reason}"),
        )
    }
}

/// Serves HTTP/1 with upgrades (the tunnels) on `stream`.
async fn serve_http<S, F, Fut>(stream: S, handle: F)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let service = service_fn(move |request| {
        let answered = handle(request);
        async move { Ok::<_, Infallible>(answered.await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
}

/// The scope of a shared-proxy request: its `Proxy-Authorization` must be
/// `Bearer` and a grant signed with `key`; else why not.
fn authorize(key: &EgressKey, request: &Request<Incoming>) -> Result<EgressScope, String> {
    let token = request
        .headers()
        .get(hyper::header::PROXY_AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .ok_or("the egress proxy needs Proxy-Authorization: Bearer <egress token>")?;
    key.verify(token)
        .map(|(grant, left)| EgressScope::of_grant(grant, left))
}

/// Logs a `CONNECT` without a valid grant and answers `407` with the reason.
fn unauthorized(reason: &str) -> Response<ProxyBody> {
    tracing::warn!(%reason, "runner egress refused: no valid grant");
    let mut response = answer(StatusCode::PROXY_AUTHENTICATION_REQUIRED, reason);
    response.headers_mut().insert(
        hyper::header::PROXY_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer"),
    );
    response
}

/// The origin behind an inspected tunnel: one HTTP/1 connection at a time,
/// dialled again at the same address once the origin has closed it.
struct Origin {
    address: std::net::SocketAddr,
    connect_timeout: Duration,
    sender: Option<hyper::client::conn::http1::SendRequest<Incoming>>,
}

impl Origin {
    /// Speaks HTTP/1 over `stream` from now on.
    async fn attach(&mut self, stream: TcpStream) -> Result<(), String> {
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|err| err.to_string())?;
        tokio::spawn(connection);
        self.sender = Some(sender);
        Ok(())
    }

    /// Sends `request` to the origin. A request the closed connection did
    /// not take (the origin closed it just now) is sent once more over a
    /// new one; one it took is never sent twice.
    async fn forward(&mut self, request: Request<Incoming>) -> Result<Response<Incoming>, String> {
        let sent = self.ready().await?.try_send_request(request).await;
        match sent {
            Ok(response) => Ok(response),
            Err(mut failed) => match failed.take_message() {
                Some(request) => {
                    self.sender = None;
                    self.ready()
                        .await?
                        .send_request(request)
                        .await
                        .map_err(|err| err.to_string())
                }
                None => Err(failed.into_error().to_string()),
            },
        }
    }

    /// A connection ready for the next request, dialling a new one when the
    /// last was closed.
    async fn ready(
        &mut self,
    ) -> Result<&mut hyper::client::conn::http1::SendRequest<Incoming>, String> {
        let usable = match self.sender.as_mut() {
            Some(sender) => sender.ready().await.is_ok(),
            None => false,
        };
        if !usable {
            self.sender = None;
            let stream =
                tokio::time::timeout(self.connect_timeout, TcpStream::connect(self.address))
                    .await
                    .map_err(|_| "connecting again timed out".to_owned())?
                    .map_err(|err| format!("connecting again: {err}"))?;
            self.attach(stream).await?;
        }
        self.sender
            .as_mut()
            .ok_or_else(|| "no connection to the origin".to_owned())
    }
}

/// A response with a plain-text body.
fn answer(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let body = Full::new(Bytes::from(text.to_owned()))
        .map_err(|never| match never {})
        .boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    if !text.is_empty() {
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    response
}

#[cfg(test)]
mod tests;
