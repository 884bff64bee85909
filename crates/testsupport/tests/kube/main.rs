//! The fake Kubernetes API server, driven over plain HTTP and a raw WebSocket:
//! its objects ([`objects`]), the processes of its containers
//! ([`containers`]) and exec ([`exec`]). What they share is here: a cluster
//! whose containers run shell commands, and reading exec frames.
#![allow(clippy::expect_used)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use toolserver_testsupport::kube::{FakeCluster, FakeClusterOptions};
use toolserver_testsupport::wait::until_within;

mod containers;
mod exec;
mod objects;

const BOTH: &str = "v5.channel.k8s.io, v4.channel.k8s.io";
const PODS: &str = "/api/v1/namespaces/ns/pods";

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

struct Fixture {
    cluster: FakeCluster,
    root: tempfile::TempDir,
    http: reqwest::Client,
}

impl Fixture {
    /// A cluster whose `node` is `sh` and whose worker is a shell script.
    fn start() -> Self {
        let root = tempfile::Builder::new()
            .prefix("k")
            .tempdir_in("/tmp")
            .expect("temp dir");
        let worker_dir = root.path().join("worker");
        std::fs::create_dir(&worker_dir).expect("worker dir");
        let script =
            "echo \"$SOCKET $CACHE_FILE $1\" > \"$1\"; pwd >> \"$1\"; echo hello; exec sleep 30";
        std::fs::write(worker_dir.join("main.js"), script).expect("worker script");
        let cluster = FakeCluster::start(FakeClusterOptions {
            node_binary: PathBuf::from("/bin/sh"),
            worker_dir,
            root: root.path().join("c"),
        });
        Self {
            cluster,
            root,
            http: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.cluster.url())
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let response = request.send().await.expect("send a request");
        let status = response.status();
        (status, response.json().await.expect("a JSON body"))
    }

    async fn create_pod(&self, name: &str, command: &[&str]) -> Value {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "worker", "pod": name}},
            "spec": {"containers": [{
                "name": "main",
                "image": "toolserver/worker",
                "command": command,
                "env": [
                    {"name": "SOCKET", "value": "/tmp/w.sock"},
                    {"name": "CACHE_FILE", "value": "/cache/f"},
                ],
            }]},
        });
        let (status, pod) = self.send(self.http.post(self.url(PODS)).json(&pod)).await;
        assert_eq!(status, StatusCode::CREATED, "{pod}");
        pod
    }

    /// The host directory of the pod's `/tmp`.
    fn tmp(&self, pod: &Value) -> PathBuf {
        let uid = pod["metadata"]["uid"].as_str().expect("a uid");
        self.root.path().join("c/pods").join(uid).join("tmp")
    }

    async fn exec(
        &self,
        pod: &str,
        command: &[&str],
        stdin: bool,
        protocols: &str,
    ) -> Result<(Socket, String), tungstenite::Error> {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        query
            .append_pair("stdout", "true")
            .append_pair("stderr", "true");
        if stdin {
            query.append_pair("stdin", "true");
        }
        for arg in command {
            query.append_pair("command", arg);
        }
        let url = self
            .url(&format!("{PODS}/{pod}/exec?{}", query.finish()))
            .replace("http://", "ws://");
        let mut request = url.into_client_request()?;
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            protocols.parse().expect("a header value"),
        );
        let (socket, response) = tokio_tungstenite::connect_async(request).await?;
        let protocol = response
            .headers()
            .get("Sec-WebSocket-Protocol")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        Ok((socket, protocol))
    }
}

async fn in_time<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .expect("in time")
}

/// The next binary frame, or `None` once the socket closes.
async fn frame(socket: &mut Socket) -> Option<Vec<u8>> {
    in_time(async {
        loop {
            match socket.next().await? {
                Ok(Message::Binary(data)) => return Some(data.to_vec()),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    })
    .await
}

async fn status(socket: &mut Socket) -> Value {
    let frame = frame(socket).await.expect("a status frame");
    assert_eq!(frame[0], 3, "{frame:?}");
    serde_json::from_slice(&frame[1..]).expect("a JSON status")
}

fn alive(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok()
}

/// How long a pod's processes get to do what a test waits for.
const PROMPTLY: Duration = Duration::from_secs(10);

async fn pid_in(file: &Path) -> u32 {
    until_within("the pid file to be written", PROMPTLY, || async {
        std::fs::read_to_string(file).is_ok_and(|text| text.ends_with('\n'))
    })
    .await;
    std::fs::read_to_string(file)
        .expect("the pid file")
        .trim()
        .parse()
        .expect("a pid")
}

/// Writes its pid to `main.pid` in its working directory, the pod's `/tmp`.
const MAIN: &[&str] = &["sh", "-c", "echo $$ > main.pid; exec sleep 30"];
