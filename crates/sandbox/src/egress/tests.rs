//! The proxy over a real unix socket, against loopback listeners.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};
use toolserver_testsupport::net::send_connect;

use super::*;

struct Served {
    _dir: tempfile::TempDir,
    socket: std::path::PathBuf,
    scope: EgressScope,
    proxy: EgressProxy,
    _task: tokio::task::JoinHandle<()>,
}

fn settings(callback_base: Option<Url>) -> EgressSettings {
    EgressSettings {
        allow_private: false,
        resolve_overrides: HashMap::from([(
            "api.example.test".to_owned(),
            IpAddr::from([127, 0, 0, 1]),
        )]),
        callback_base,
        resolve_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(2),
    }
}

fn serve(settings: EgressSettings) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let scope = EgressScope::new("tr-test", "acct", "tool_1");
    let proxy = EgressProxy::new(settings);
    let task = proxy.serve(&socket, scope.clone(), None).unwrap();
    Served {
        _dir: dir,
        socket,
        scope,
        proxy,
        _task: task,
    }
}

/// Sends `CONNECT authority`; returns the status, the reason body, and the
/// stream (a tunnel when the status is 200).
async fn connect(socket: &Path, authority: &str) -> (u16, String, UnixStream) {
    let stream = UnixStream::connect(socket).await.unwrap();
    send_connect(stream, authority, "").await
}

/// A loopback listener that answers every connection with one HTTP response
/// naming the request line it got, and closes it.
async fn http_origin() -> SocketAddr {
    origin_answering("connection: close\r\n").await
}

/// [`http_origin`], but answering keep-alive before dropping the
/// connection, as a server killed between requests does.
async fn dropping_origin() -> SocketAddr {
    origin_answering("").await
}

/// A loopback listener that answers one request per connection with
/// `headers` in its response, naming the request line it got.
async fn origin_answering(headers: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let read = stream.read(&mut buf).await.unwrap_or(0);
                let text = String::from_utf8_lossy(&buf[..read]).into_owned();
                let line = text.lines().next().unwrap_or_default().to_owned();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n{headers}\r\n{line}",
                    line.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    address
}

async fn request_through<S: AsyncRead + AsyncWrite + Unpin>(tunnel: &mut S, head: &str) -> String {
    tunnel.write_all(head.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tunnel.read_to_end(&mut reply)).await;
    String::from_utf8_lossy(&reply).into_owned()
}

#[tokio::test]
async fn loopback_and_private_destinations_are_refused_with_the_reason() {
    let served = serve(settings(None));
    for authority in [
        "127.0.0.1:5432",
        "[::1]:4222",
        "[::ffff:127.0.0.1]:5432",
        "10.0.0.1:80",
        "169.254.169.254:80",
        "localhost:5432",
    ] {
        let (status, reason, _) = connect(&served.socket, authority).await;
        assert_eq!(status, 403, "{authority}: {reason}");
        assert!(
            reason.contains("not a public address"),
            "{authority}: {reason}"
        );
    }
}

#[tokio::test]
async fn a_public_name_is_tunnelled_to_its_checked_address_and_its_bytes_counted() {
    let origin = http_origin().await;
    let served = serve(settings(None));
    let authority = format!("api.example.test:{}", origin.port());
    let (status, _, mut tunnel) = connect(&served.socket, &authority).await;
    assert_eq!(status, 200);
    let head = "GET /anything HTTP/1.1\r\nhost: x\r\n\r\n";
    let reply = request_through(&mut tunnel, head).await;
    assert!(reply.ends_with("GET /anything HTTP/1.1"), "{reply}");
    assert_eq!(
        served.proxy.egress_bytes("acct"),
        (head.len() + reply.len()) as u64,
        "both ways, for the scope's account"
    );
    assert_eq!(served.proxy.egress_bytes("another"), 0);
}

#[tokio::test]
async fn only_job_callbacks_and_admitted_bundles_reach_the_servers_own_origin() {
    let origin = http_origin().await;
    let base = Url::parse(&format!("http://127.0.0.1:{}/", origin.port())).unwrap();
    let served = serve(settings(Some(base.clone())));
    let bundle = format!("{base}bundles/abc?sig=1");
    served.scope.admit(&bundle, Duration::from_secs(60));
    let authority = format!("127.0.0.1:{}", origin.port());
    let cases = [
        ("POST /sandbox-jobs/r1/complete", true),
        ("POST /sandbox-jobs/r1/heartbeat", true),
        ("POST /runner/fetch", true),
        ("GET /runner/fetch", false),
        ("POST /runner/fetch/x", false),
        ("GET /bundles/abc?sig=1", true),
        ("GET /bundles/abc?sig=2", false),
        ("GET /sandbox-jobs/r1/complete", false),
        ("POST /agents", false),
        ("GET /healthz", false),
    ];
    for (line, admitted) in cases {
        let (status, _, mut tunnel) = connect(&served.socket, &authority).await;
        assert_eq!(status, 200, "{line}");
        let head = format!(
            "{line} HTTP/1.1\r\nhost: {authority}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        let reply = request_through(&mut tunnel, &head).await;
        if admitted {
            assert!(
                reply.ends_with(&format!("{line} HTTP/1.1")),
                "{line}: {reply}"
            );
        } else {
            assert!(reply.starts_with("HTTP/1.1 403"), "{line}: {reply}");
            assert!(
                reply.contains("neither a callback to the server nor a bundle"),
                "{line}: {reply}"
            );
        }
    }
}

/// Reads one HTTP/1.1 response (head and a `content-length` body).
async fn one_response<S: AsyncRead + Unpin>(tunnel: &mut S) -> String {
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n\r\n") {
        tunnel.read_exact(&mut byte).await.unwrap();
        reply.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&reply).into_owned();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .map_or(0, |n| n.trim().parse().unwrap());
    let mut body = vec![0u8; length];
    tunnel.read_exact(&mut body).await.unwrap();
    format!("{head}{}", String::from_utf8_lossy(&body))
}

#[tokio::test]
async fn callbacks_in_one_tunnel_outlive_the_origin_closing_its_connection() {
    // The origin drops each connection after one keep-alive answer, as a
    // server that restarted would have: the next callback in the same tunnel
    // still arrives, over a new connection.
    let origin = dropping_origin().await;
    let base = Url::parse(&format!("http://127.0.0.1:{}/", origin.port())).unwrap();
    let served = serve(settings(Some(base)));
    let authority = format!("127.0.0.1:{}", origin.port());
    let (status, _, mut tunnel) = connect(&served.socket, &authority).await;
    assert_eq!(status, 200);
    for line in [
        "POST /sandbox-jobs/r1/heartbeat",
        "POST /sandbox-jobs/r1/heartbeat",
        "POST /sandbox-jobs/r1/complete",
    ] {
        let head = format!("{line} HTTP/1.1\r\nhost: {authority}\r\ncontent-length: 0\r\n\r\n");
        tunnel.write_all(head.as_bytes()).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), one_response(&mut tunnel))
            .await
            .expect("an answer");
        assert!(reply.starts_with("HTTP/1.1 200"), "{line}: {reply}");
        assert!(
            reply.ends_with(&format!("{line} HTTP/1.1")),
            "{line}: {reply}"
        );
    }
}

#[tokio::test]
async fn anything_but_connect_is_refused() {
    let served = serve(settings(None));
    let mut stream = UnixStream::connect(&served.socket).await.unwrap();
    let reply = request_through(
        &mut stream,
        "GET http://api.example.test/ HTTP/1.1\r\nhost: api.example.test\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 405"), "{reply}");
}

const SHARED_KEY: &str = "a shared egress key of 32 bytes!";

/// A shared proxy on loopback TCP with [`SHARED_KEY`].
async fn serve_shared(settings: EgressSettings) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let key = EgressKey::new(SHARED_KEY).unwrap();
    (
        address,
        EgressProxy::new(settings).serve_shared(listener, key),
    )
}

fn grant(allow: Option<&[&str]>) -> EgressGrant {
    EgressGrant {
        runner: "tr-pod".into(),
        account: "acct".into(),
        tool: "tool_1".into(),
        allow: allow.map(|patterns| {
            let patterns: Vec<String> = patterns.iter().map(|p| (*p).to_owned()).collect();
            toolserver_domain::EgressAllowList::parse(&patterns).unwrap()
        }),
        admit: vec![],
    }
}

async fn connect_shared(
    proxy: SocketAddr,
    authority: &str,
    token: Option<&str>,
) -> (u16, String, tokio::net::TcpStream) {
    let stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let headers = token.map_or(String::new(), |token| {
        format!("Proxy-Authorization: Bearer {token}\r\n")
    });
    send_connect(stream, authority, &headers).await
}

#[tokio::test]
async fn the_shared_proxy_refuses_connects_without_a_valid_grant() {
    let (proxy, _task) = serve_shared(settings(None)).await;
    let origin = http_origin().await;
    let authority = format!("api.example.test:{}", origin.port());
    let (status, reason, _) = connect_shared(proxy, &authority, None).await;
    assert_eq!(status, 407, "{reason}");
    assert!(reason.contains("Proxy-Authorization"), "{reason}");

    let forged = EgressKey::new(&"f".repeat(32))
        .unwrap()
        .mint(&grant(None), Duration::from_secs(60))
        .unwrap();
    let (status, reason, _) = connect_shared(proxy, &authority, Some(&forged)).await;
    assert_eq!(status, 407, "{reason}");
    assert!(reason.contains("not valid"), "{reason}");
}

#[tokio::test]
async fn the_shared_proxy_applies_the_grants_allow_list_and_the_public_only_rule() {
    let (proxy, _task) = serve_shared(settings(None)).await;
    let origin = http_origin().await;
    let key = EgressKey::new(SHARED_KEY).unwrap();
    let authority = format!("api.example.test:{}", origin.port());

    let open = key.mint(&grant(None), Duration::from_secs(60)).unwrap();
    let (status, _, mut tunnel) = connect_shared(proxy, &authority, Some(&open)).await;
    assert_eq!(status, 200);
    let reply = request_through(&mut tunnel, "GET /through HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(reply.ends_with("GET /through HTTP/1.1"), "{reply}");
    let (status, reason, _) = connect_shared(proxy, "127.0.0.1:5432", Some(&open)).await;
    assert_eq!(status, 403, "{reason}");
    assert!(reason.contains("not a public address"), "{reason}");

    let narrow = key
        .mint(&grant(Some(&["*.stripe.com"])), Duration::from_secs(60))
        .unwrap();
    let (status, reason, _) = connect_shared(proxy, &authority, Some(&narrow)).await;
    assert_eq!(status, 403, "{reason}");
    assert!(
        reason.contains("api.example.test is not in the tool's egress allow list"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_grant_admits_its_bundle_url_on_the_servers_private_origin() {
    let origin = http_origin().await;
    let (proxy, _task) = serve_shared(settings(None)).await;
    let key = EgressKey::new(SHARED_KEY).unwrap();
    let bundle = format!("http://127.0.0.1:{}/bundles/abc?sig=1", origin.port());
    let mut admitted = grant(Some(&["api.example.com"]));
    admitted.admit = vec![bundle.clone()];
    let token = key.mint(&admitted, Duration::from_secs(60)).unwrap();
    let authority = format!("127.0.0.1:{}", origin.port());
    let (status, reason, mut tunnel) = connect_shared(proxy, &authority, Some(&token)).await;
    assert_eq!(status, 200, "{reason}");
    let reply = request_through(
        &mut tunnel,
        &format!("GET /bundles/abc?sig=1 HTTP/1.1\r\nhost: {authority}\r\n\r\n"),
    )
    .await;
    assert!(
        reply.ends_with("GET /bundles/abc?sig=1 HTTP/1.1"),
        "{reply}"
    );

    let (status, _, mut tunnel) = connect_shared(proxy, &authority, Some(&token)).await;
    assert_eq!(status, 200);
    let reply = request_through(
        &mut tunnel,
        &format!("GET /bundles/other HTTP/1.1\r\nhost: {authority}\r\n\r\n"),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
}
