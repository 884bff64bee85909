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
        isolation: IsolationMode::Auto,
        hidden: vec![],
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
