//! Load generator for the Kubernetes backend's transports (`make bench`). In
//! one process, for a tool that returns at once, it measures warm calls:
//!   - straight to a local worker's unix socket, no executor (the floor),
//!   - through the local executor (a unix socket per call, the relay and the
//!     limit watch: the baseline),
//!   - through the Kubernetes executor on its direct channel, against a local
//!     server playing the API server and kubelet that runs the same Node
//!     worker in "pods" with loopback addresses of their own (a TCP
//!     connection with the runner's secret, invoke),
//!   - through the Kubernetes executor on the exec channel (one exec per
//!     call: WebSocket upgrade, the bridge process, health check, invoke),
//!   - their ratios to the floor and the baseline, and the cold start of a pod's worker
//!     (pod + launch).
//!
//! A real cluster adds the pod network's round trip to a direct call (about
//! 0.1-0.5 ms) and the API server's and the kubelet's hops to each exec; this
//! measures what the backend itself costs.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Map};
use toolserver_domain::{AccountId, Sha256Digest, ToolId};
use toolserver_kubernetes::manifests::runner_network_policy;
use toolserver_kubernetes::{KubernetesExecutor, KubernetesSettings, RunnerChannel};
use toolserver_sandbox::{
    BundleRef, Executor, Frame, InvokeRequest, IsolationMode, LocalExecutor, LocalSettings,
    ReservationKey, WorkerAssets, WorkerClient,
};
use toolserver_testsupport::bench::{ms, summary};
use toolserver_testsupport::kube::{FakeCluster, FakeClusterOptions};

const WARMUP: usize = 20;
const SAMPLES: usize = 300;
const COLD_STARTS: usize = 10;
const TOOL: &str = "export default { execute(ctx, input) { return input; } };";

fn request() -> InvokeRequest {
    InvokeRequest {
        call_id: uuid::Uuid::new_v4().to_string(),
        idempotency_key: "bench".into(),
        input: json!({"n": 1}),
        config: Map::new(),
        bundle: BundleRef {
            sha256: Sha256Digest::of(TOOL.as_bytes()).to_hex(),
            inline: Some(base64::engine::general_purpose::STANDARD.encode(TOOL)),
            url: None,
        },
        deadline_ms: 10_000,
        max_output_bytes: 1 << 20,
        async_meta: None,
        egress_allow: None,
        egress_token: None,
        fetch: None,
        traceparent: None,
    }
}

async fn call(executor: &dyn Executor, key: &ReservationKey) -> Duration {
    let started = Instant::now();
    let mut frames = executor.invoke(key, request()).await.unwrap();
    loop {
        let frame = frames.recv().await.expect("a terminal frame");
        if frame.is_terminal() {
            assert!(matches!(frame, Frame::Final { .. }), "{frame:?}");
            return started.elapsed();
        }
    }
}

async fn socket_call(worker: &WorkerClient) -> Duration {
    let started = Instant::now();
    let mut frames = worker.invoke(&request()).await.unwrap();
    loop {
        let frame = frames.recv().await.expect("a terminal frame");
        if frame.is_terminal() {
            assert!(matches!(frame, Frame::Final { .. }), "{frame:?}");
            return started.elapsed();
        }
    }
}

async fn warm(name: &str, executor: &dyn Executor, key: &ReservationKey) -> Duration {
    for _ in 0..WARMUP {
        call(executor, key).await;
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        samples.push(call(executor, key).await);
    }
    summary(name, samples).0
}

async fn floor(worker: &WorkerClient) -> Duration {
    for _ in 0..WARMUP {
        socket_call(worker).await;
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        samples.push(socket_call(worker).await);
    }
    summary("local worker socket, no executor (floor)", samples).0
}

#[tokio::main]
async fn main() {
    let dir = tempfile::Builder::new()
        .prefix("k8sb")
        .tempdir_in("/tmp")
        .unwrap();
    let key = ReservationKey::new(AccountId::parse("bench").unwrap(), ToolId::generate());

    let local = LocalExecutor::new(LocalSettings {
        node_binary: "node".into(),
        root: dir.path().join("local"),
        idle_timeout: Duration::from_secs(3600),
        start_timeout: Duration::from_secs(10),
        kill_grace: Duration::from_secs(2),
        isolation: IsolationMode::None,
        bwrap_binary: "bwrap".into(),
        egress: Default::default(),
        limits: Default::default(),
    })
    .unwrap();

    let assets = WorkerAssets::install(&dir.path().join("worker")).unwrap();
    let cluster = FakeCluster::start(FakeClusterOptions {
        node_binary: PathBuf::from("node"),
        worker_dir: assets.dir().to_owned(),
        root: dir.path().join("r"),
    });
    cluster.insert(
        "/apis/networking.k8s.io/v1/namespaces/bench/networkpolicies",
        serde_json::to_value(runner_network_policy("bench")).unwrap(),
    );
    let executor = |channel: RunnerChannel| {
        let client =
            toolserver_kubernetes::client(kube::Config::new(cluster.url().parse().unwrap()))
                .unwrap();
        let mut settings = KubernetesSettings::new("bench", "toolserver-runner:bench");
        settings.idle_timeout = Duration::from_secs(3600);
        settings.channel = channel;
        KubernetesExecutor::new(client, settings)
    };
    let kubernetes = executor(RunnerChannel::DEFAULT_DIRECT).await.unwrap();
    let exec_only = executor(RunnerChannel::Exec).await.unwrap();

    println!("warm calls, {SAMPLES} each after {WARMUP} warm-up calls, one client:");
    let baseline = warm("local executor (unix socket, baseline)", &local, &key).await;
    let floor = floor(&WorkerClient::new(local.socket_path(&key))).await;
    let direct = warm(
        "kubernetes executor (direct pod channel)",
        &kubernetes,
        &key,
    )
    .await;
    let exec = warm("kubernetes executor (exec fallback)", &exec_only, &key).await;
    for (name, p50) in [
        ("local executor", baseline),
        ("kubernetes direct", direct),
        ("kubernetes exec", exec),
    ] {
        println!(
            "{name}: p50 {:.2}x the floor (+{:.3} ms), {:.2}x the local executor (+{:.3} ms)",
            ms(p50) / ms(floor),
            ms(p50) - ms(floor),
            ms(p50) / ms(baseline),
            ms(p50) - ms(baseline)
        );
    }

    let mut cold = Vec::with_capacity(COLD_STARTS);
    for _ in 0..COLD_STARTS {
        let key = ReservationKey::new(AccountId::parse("bench").unwrap(), ToolId::generate());
        let started = Instant::now();
        call(&kubernetes, &key).await;
        cold.push(started.elapsed());
        kubernetes.stop(&key).await.unwrap();
    }
    summary("cold call (new pod, launch, call)", cold);
}
