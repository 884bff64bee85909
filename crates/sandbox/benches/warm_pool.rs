//! The first call of a new tool on the local backend under bubblewrap:
//! with the warm pool full (a warm worker claimed) and drained (size 0: the
//! worker booted for the call), over the same count of new tools, measured
//! alternately in one run. Each sample is one new (account, tool) key's
//! first call, from `invoke` to its final frame; between samples the pool
//! refills and the runner is stopped.
//! `cargo bench -p toolserver-sandbox --bench warm_pool`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Map};
use toolserver_domain::{AccountId, Sha256Digest, ToolId};
use toolserver_sandbox::{
    BundleRef, Executor, InvokeRequest, IsolationMode, LocalExecutor, LocalSettings, ReservationKey,
};
use toolserver_testsupport::bench::summary;

/// New tools measured per pool state.
const TOOLS: usize = 100;
/// The warm pool's size when full.
const POOL: usize = 2;

const ECHO: &str = "export default { async execute(ctx, input) { return { echo: input }; } };";

fn executor(root: &std::path::Path, pool: usize) -> LocalExecutor {
    let executor = LocalExecutor::new(LocalSettings {
        node_binary: "node".into(),
        root: root.to_owned(),
        idle_timeout: Duration::from_secs(300),
        start_timeout: Duration::from_secs(10),
        kill_grace: Duration::from_millis(500),
        isolation: IsolationMode::Bwrap,
        bwrap_binary: "bwrap".into(),
        egress: Default::default(),
        limits: Default::default(),
    })
    .expect("bubblewrap works here (the bench measures isolated runners)");
    executor.start_warm_pool(pool).unwrap();
    executor
}

fn request(n: usize) -> InvokeRequest {
    InvokeRequest {
        call_id: format!("call-{n}"),
        idempotency_key: format!("idem-{n}"),
        input: json!({ "n": n }),
        config: Map::new(),
        bundle: BundleRef {
            sha256: Sha256Digest::of(ECHO.as_bytes()).to_hex(),
            inline: Some(base64::engine::general_purpose::STANDARD.encode(ECHO)),
            url: None,
        },
        deadline_ms: 10_000,
        max_output_bytes: 1024 * 1024,
        async_meta: None,
        egress_allow: None,
        egress_token: None,
        fetch: None,
        traceparent: None,
    }
}

/// Waits until `executor`'s pool holds `size` ready workers.
async fn refilled(executor: &LocalExecutor, size: usize) {
    while executor.warm_pids().len() < size {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One new tool's first call on `executor`, timed; its runner is stopped after.
async fn first_call(executor: &LocalExecutor, n: usize) -> Duration {
    let key = ReservationKey::new(AccountId::parse("acct_bench").unwrap(), ToolId::generate());
    let started = Instant::now();
    let mut frames = executor.invoke(&key, request(n)).await.unwrap();
    while let Some(frame) = frames.recv().await {
        if frame.is_terminal() {
            break;
        }
    }
    let took = started.elapsed();
    executor.stop(&key).await.unwrap();
    took
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let warm = executor(&dir.path().join("warm"), POOL);
    let drained = executor(&dir.path().join("drained"), 0);
    let (mut warm_samples, mut drained_samples) = (Vec::new(), Vec::new());
    for n in 0..TOOLS {
        refilled(&warm, POOL).await;
        warm_samples.push(first_call(&warm, n).await);
        drained_samples.push(first_call(&drained, n).await);
    }
    summary("first call, warm pool", warm_samples);
    summary("first call, drained pool (size 0)", drained_samples);
}
