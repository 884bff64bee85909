//! Builds an executor in a temporary directory and makes requests.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use base64::Engine;
use serde_json::{Map, Value};
use toolserver_domain::{AccountId, Sha256Digest, ToolId};
use toolserver_sandbox::{
    BundleRef, Executor, Frame, FrameStream, InvokeRequest, IsolationMode, LocalExecutor,
    LocalSettings, ReservationKey,
};

pub struct Harness {
    pub executor: LocalExecutor,
    _dir: tempfile::TempDir,
}

pub fn settings(root: &std::path::Path) -> LocalSettings {
    LocalSettings {
        node_binary: "node".into(),
        root: root.to_owned(),
        idle_timeout: Duration::from_secs(300),
        start_timeout: Duration::from_secs(10),
        kill_grace: Duration::from_millis(500),
        isolation: IsolationMode::PreferBwrap,
        bwrap_binary: "bwrap".into(),
        egress: Default::default(),
        limits: Default::default(),
    }
}

impl Harness {
    pub fn new() -> Self {
        Self::with(|_| {})
    }

    pub fn with(adjust: impl FnOnce(&mut LocalSettings)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut settings = settings(&dir.path().join("runners"));
        adjust(&mut settings);
        Self {
            executor: LocalExecutor::new(settings).unwrap(),
            _dir: dir,
        }
    }
}

pub fn key(account: &str) -> ReservationKey {
    ReservationKey::new(AccountId::parse(account).unwrap(), ToolId::generate())
}

pub fn inline(source: &str) -> BundleRef {
    BundleRef {
        sha256: Sha256Digest::of(source.as_bytes()).to_hex(),
        inline: Some(base64::engine::general_purpose::STANDARD.encode(source)),
        url: None,
    }
}

pub fn request(bundle: BundleRef, input: Value) -> InvokeRequest {
    InvokeRequest {
        call_id: uuid_like(),
        idempotency_key: "idem-1".into(),
        input,
        config: Map::new(),
        bundle,
        deadline_ms: 10_000,
        max_output_bytes: 1024 * 1024,
        async_meta: None,
        egress_allow: None,
        egress_token: None,
        fetch: None,
        traceparent: None,
    }
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "call-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// Collects every frame of a call, up to and including the terminal one.
pub async fn collect(mut frames: FrameStream) -> Vec<Frame> {
    let mut out = Vec::new();
    while let Some(frame) = tokio::time::timeout(Duration::from_secs(30), frames.recv())
        .await
        .expect("frames keep coming")
    {
        let terminal = frame.is_terminal();
        out.push(frame);
        if terminal {
            break;
        }
    }
    out
}

/// Runs one call and returns its terminal frame.
pub async fn run(executor: &LocalExecutor, key: &ReservationKey, request: InvokeRequest) -> Frame {
    let frames = collect(executor.invoke(key, request).await.unwrap()).await;
    frames.last().cloned().expect("a terminal frame")
}

pub const ECHO: &str =
    "export default { async execute(ctx, input) { return { echo: input, config: ctx.config }; } };";

pub fn final_value(frame: &Frame) -> Value {
    match frame {
        Frame::Final { value } => value.clone(),
        other => panic!("expected a final frame, got {other:?}"),
    }
}

pub fn echo_of(frame: &Frame) -> Value {
    final_value(frame)["echo"].clone()
}

/// One POST the callback sink received.
#[derive(Debug, Clone, PartialEq)]
pub struct Posted {
    pub path: String,
    pub token: Option<String>,
    pub body: Value,
}

/// A loopback HTTP server standing in for the server's job callbacks: it
/// records every request (path, `x-job-token`, JSON body) and answers 200 `{}`.
pub struct CallbackSink {
    pub url: String,
    posted: std::sync::Arc<std::sync::Mutex<Vec<Posted>>>,
}

impl CallbackSink {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let posted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = posted.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    if let Some(post) = answer(socket).await {
                        record.lock().unwrap().push(post);
                    }
                });
            }
        });
        Self { url, posted }
    }

    /// The sink's base URL, where the job callbacks live.
    pub fn base(&self) -> url::Url {
        url::Url::parse(&format!("{}/", self.url)).unwrap()
    }

    /// Async metadata of a detached call reporting to this sink.
    pub fn async_meta(&self, result_id: &str) -> Value {
        serde_json::json!({
            "resultId": result_id,
            "completePath": format!("/sandbox-jobs/{result_id}/complete"),
            "completeUrl": format!("{}/sandbox-jobs/{result_id}/complete", self.url),
            "completionToken": format!("token-{result_id}"),
        })
    }

    pub fn posted(&self) -> Vec<Posted> {
        self.posted.lock().unwrap().clone()
    }

    /// The first request to `path`, waiting up to `within` for it.
    pub async fn first(&self, path: &str, within: Duration) -> Option<Posted> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(post) = self.posted().into_iter().find(|p| p.path == path) {
                return Some(post);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Reads one HTTP/1.1 request with a content-length body and answers 200.
async fn answer(mut socket: tokio::net::TcpStream) -> Option<Posted> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let read = socket.read(&mut buf).await.ok()?;
        if read == 0 {
            return None;
        }
        bytes.extend_from_slice(&buf[..read]);
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
    let header = |name: &str| {
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    };
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while bytes.len() < head_end + length {
        let read = socket.read(&mut buf).await.ok()?;
        if read == 0 {
            return None;
        }
        bytes.extend_from_slice(&buf[..read]);
    }
    let path = head.split_whitespace().nth(1)?.to_owned();
    let body = serde_json::from_slice(&bytes[head_end..head_end + length]).unwrap_or(Value::Null);
    let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
    socket.write_all(reply.as_bytes()).await.ok()?;
    Some(Posted {
        path,
        token: header("x-job-token"),
        body,
    })
}
