//! `toolserver egress-proxy`, the binary as a Kubernetes Deployment runs it:
//! a `CONNECT` needs a grant signed with the shared key, and then gets the
//! public-only rule and the grant's allow list.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use toolserver_domain::EgressAllowList;
use toolserver_sandbox::{EgressGrant, EgressKey};
use toolserver_testsupport::http::free_port;
use toolserver_testsupport::net::send_connect;

const KEY: &str = "a key the servers and the proxy share";

struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `CONNECT authority` to the proxy on `port` with `token`; the
/// status, the reason, and the stream.
async fn connect(port: u16, authority: &str, token: Option<&str>) -> (u16, String, TcpStream) {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let auth = token.map_or(String::new(), |token| {
        format!("Proxy-Authorization: Bearer {token}\r\n")
    });
    send_connect(stream, authority, &auth).await
}

#[tokio::test]
async fn the_egress_proxy_command_serves_signed_grants_only() {
    let origin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin_port = origin.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = origin.accept().await {
            let _ = socket.write_all(b"hello from the origin").await;
        }
    });
    let port = free_port();
    let _proxy = Proxy(
        Command::new(env!("CARGO_BIN_EXE_toolserver"))
            .arg("egress-proxy")
            .env_clear()
            .env("TOOLSERVER_EGRESS_LISTEN", format!("127.0.0.1:{port}"))
            .env("TOOLSERVER_EGRESS_TOKEN_KEY", KEY)
            .env(
                "TOOLSERVER_RUNNER_EGRESS_TEST_HOSTS",
                "api.example.test=127.0.0.1,other.example.test=127.0.0.1",
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the proxy did not come up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let listed = format!("api.example.test:{origin_port}");
    let (status, reason, _) = connect(port, &listed, None).await;
    assert_eq!(status, 407, "{reason}");

    let key = EgressKey::new(KEY).unwrap();
    let grant = EgressGrant {
        runner: "tr-x".into(),
        account: "acct".into(),
        tool: "tool_1".into(),
        allow: Some(EgressAllowList::parse(&["api.example.test".to_owned()]).unwrap()),
        admit: vec![],
    };
    let token = key.mint(&grant, Duration::from_secs(60)).unwrap();
    let (status, reason, mut tunnel) = connect(port, &listed, Some(&token)).await;
    assert_eq!(status, 200, "{reason}");
    let mut greeting = String::new();
    tunnel.read_to_string(&mut greeting).await.unwrap();
    assert_eq!(greeting, "hello from the origin");

    let (status, reason, _) = connect(
        port,
        &format!("other.example.test:{origin_port}"),
        Some(&token),
    )
    .await;
    assert_eq!(status, 403, "{reason}");
    assert!(
        reason.contains("not in the tool's egress allow list"),
        "{reason}"
    );
    let (status, reason, _) = connect(port, "127.0.0.1:5432", Some(&token)).await;
    assert_eq!(status, 403, "{reason}");
}
