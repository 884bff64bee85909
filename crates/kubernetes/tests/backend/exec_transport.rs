//! The transports (the direct channel on the pod network, and exec) and the
//! whole executor against a local server that plays the API server and
//! kubelet: pods are objects in memory with addresses of their own on the
//! loopback network, and exec really runs the command (the real Node worker)
//! over the `v5.channel.k8s.io` WebSocket protocol. Everything above the
//! transport is the code that runs in a cluster.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Map, Value};
use toolserver_domain::{AccountId, Sha256Digest, ToolId};
use toolserver_kubernetes::manifests::runner_network_policy;
use toolserver_kubernetes::{KubernetesExecutor, KubernetesSettings, RunnerChannel};
use toolserver_sandbox::{
    BundleRef, Executor, Frame, FrameStream, InvokeRequest, ReservationKey, WorkerAssets,
};
use toolserver_testsupport::kube::{FakeCluster, FakeClusterOptions};

pub(crate) const NS: &str = "runners";

pub(crate) struct Cluster {
    pub(crate) fake: FakeCluster,
    pub(crate) executor: KubernetesExecutor,
    _dir: tempfile::TempDir,
}

/// Another server's executor on the same cluster.
async fn replica(fake: &FakeCluster) -> KubernetesExecutor {
    let config = kube::Config::new(fake.url().parse().unwrap());
    let client = toolserver_kubernetes::client(config).unwrap();
    KubernetesExecutor::new(
        client,
        KubernetesSettings::new(NS, "toolserver-runner:test"),
    )
    .await
    .unwrap()
}

pub(crate) async fn cluster(adjust: impl FnOnce(&mut KubernetesSettings)) -> Cluster {
    let dir = tempfile::Builder::new()
        .prefix("k8s")
        .tempdir_in("/tmp")
        .unwrap();
    let assets = WorkerAssets::install(&dir.path().join("worker")).unwrap();
    let fake = FakeCluster::start(FakeClusterOptions {
        node_binary: PathBuf::from("node"),
        worker_dir: assets.dir().to_owned(),
        root: dir.path().join("r"),
    });
    fake.insert(
        &format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"),
        serde_json::to_value(runner_network_policy(NS)).unwrap(),
    );
    let config = kube::Config::new(fake.url().parse().unwrap());
    let client = toolserver_kubernetes::client(config).unwrap();
    let mut settings = KubernetesSettings::new(NS, "toolserver-runner:test");
    settings.kill_grace = Duration::from_millis(500);
    adjust(&mut settings);
    let executor = KubernetesExecutor::new(client, settings).await.unwrap();
    Cluster {
        fake,
        executor,
        _dir: dir,
    }
}

impl Cluster {
    fn pod_uid(&self, key: &ReservationKey) -> Option<String> {
        self.fake
            .pod(NS, &key.runner_name())
            .map(|pod| pod["metadata"]["uid"].as_str().unwrap().to_owned())
    }

    /// Runs one call to its terminal frame.
    pub(crate) async fn call(&self, key: &ReservationKey, request: InvokeRequest) -> Frame {
        terminal(self.executor.invoke(key, request).await.unwrap()).await
    }

    fn execs(&self, key: &ReservationKey) -> usize {
        self.fake.exec_count(&key.runner_name())
    }
}

pub(crate) fn key(account: &str) -> ReservationKey {
    ReservationKey::new(AccountId::parse(account).unwrap(), ToolId::generate())
}

pub(crate) fn bundle(source: &str) -> BundleRef {
    BundleRef {
        sha256: Sha256Digest::of(source.as_bytes()).to_hex(),
        inline: Some(base64::engine::general_purpose::STANDARD.encode(source)),
        url: None,
    }
}

pub(crate) fn request(bundle: BundleRef, input: Value) -> InvokeRequest {
    InvokeRequest {
        call_id: uuid::Uuid::new_v4().to_string(),
        idempotency_key: "idem".into(),
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

async fn next(frames: &mut FrameStream) -> Frame {
    tokio::time::timeout(Duration::from_secs(30), frames.recv())
        .await
        .expect("a frame in time")
        .expect("the stream goes on")
}

async fn terminal(mut frames: FrameStream) -> Frame {
    loop {
        let frame = next(&mut frames).await;
        if frame.is_terminal() {
            return frame;
        }
    }
}

fn final_of(value: Value) -> Frame {
    Frame::Final { value }
}

const ECHO: &str = "export default { async execute(ctx, input) { return { echo: input }; } };";

#[tokio::test]
async fn streamed_frames_cross_exec_as_they_are_produced() {
    let cluster = cluster(|_| {}).await;
    let key = key("acct_1");
    let gate = tempfile::tempdir().unwrap().keep().join("go");
    let tool = r#"
import { existsSync } from 'node:fs';
export default {
  async *execute(ctx, input) {
    yield { step: 1 };
    while (!existsSync(input.gate)) await new Promise((r) => setTimeout(r, 20));
    yield { step: 2 };
  },
};"#;
    let mut frames = cluster
        .executor
        .invoke(&key, request(bundle(tool), json!({ "gate": gate })))
        .await
        .unwrap();
    // The second chunk waits for a file the test writes only after the first
    // chunk arrived: a transport that buffered would never deliver it.
    assert_eq!(
        next(&mut frames).await,
        Frame::Chunk {
            value: json!({"step": 1})
        }
    );
    std::fs::write(&gate, "").unwrap();
    assert_eq!(
        next(&mut frames).await,
        Frame::Chunk {
            value: json!({"step": 2})
        }
    );
    assert_eq!(next(&mut frames).await, Frame::End);
}

/// The API requests `cluster` received since the first `since`.
fn requests_since(cluster: &Cluster, since: usize) -> Vec<String> {
    cluster.fake.requests()[since..]
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

#[tokio::test]
async fn the_first_call_starts_pod_and_worker_and_later_calls_reuse_both() {
    let cluster = cluster(|_| {}).await;
    let key = key("acct_1");
    let first = cluster.executor.ensure(&key).await.unwrap();
    assert!(first.started);
    assert_eq!(first.name, key.runner_name());
    let uid = cluster.pod_uid(&key).expect("pod created");
    let second = cluster.executor.ensure(&key).await.unwrap();
    assert!(!second.started);

    let before = cluster.execs(&key);
    let requests_before = cluster.fake.requests().len();
    for n in 0..3 {
        let answer = cluster.call(&key, request(bundle(ECHO), json!(n))).await;
        assert_eq!(answer, final_of(json!({ "echo": n })));
    }
    // Warm calls go straight to the worker on the pod network: no exec and
    // no other API request.
    assert_eq!(cluster.execs(&key), before);
    let made = requests_since(&cluster, requests_before);
    assert!(made.is_empty(), "{made:?}");
    assert_eq!(cluster.pod_uid(&key), Some(uid));
}

#[tokio::test]
async fn the_pod_channel_answers_only_with_the_runners_secret() {
    let cluster = cluster(|_| {}).await;
    let key = key("acct_1");
    cluster.executor.ensure(&key).await.unwrap();
    let pod = cluster.fake.pod(NS, &key.runner_name()).unwrap();
    let ip = pod["status"]["podIP"].as_str().unwrap();
    let env = pod["spec"]["containers"][0]["env"].as_array().unwrap();
    let secret = env
        .iter()
        .find(|var| var["name"] == "TOOLSERVER_CHANNEL_SECRET")
        .and_then(|var| var["value"].as_str())
        .unwrap();
    let health = format!("http://{ip}:8790/health");
    let http = reqwest::Client::new();
    let anonymous = http.get(&health).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = http
        .get(&health)
        .bearer_auth("0".repeat(64))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let right = http.get(&health).bearer_auth(secret).send().await.unwrap();
    assert_eq!(right.status(), 200);
}

#[tokio::test]
async fn with_the_exec_channel_a_warm_call_is_one_exec() {
    let cluster = cluster(|settings| settings.channel = RunnerChannel::Exec).await;
    let key = key("acct_1");
    cluster.executor.ensure(&key).await.unwrap();
    let pod = cluster.fake.pod(NS, &key.runner_name()).unwrap();
    let env = pod["spec"]["containers"][0]["env"].to_string();
    assert!(!env.contains("TOOLSERVER_CHANNEL"), "no channel: {env}");
    let before = cluster.execs(&key);
    let requests_before = cluster.fake.requests().len();
    let answer = cluster.call(&key, request(bundle(ECHO), json!(1))).await;
    assert_eq!(answer, final_of(json!({"echo": 1})));
    // Health check and invoke share the bridge, and a missing pod would
    // fail the exec.
    assert_eq!(cluster.execs(&key) - before, 1);
    let made = requests_since(&cluster, requests_before);
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(
        made[0].contains(&format!("/pods/{}/exec?", key.runner_name())),
        "{made:?}"
    );
}

#[tokio::test]
async fn a_replaced_pod_is_found_again_and_its_old_address_runs_nothing() {
    let cluster = cluster(|_| {}).await;
    let other = replica(&cluster.fake).await;
    let (mine, theirs) = (key("acct_1"), key("acct_2"));
    // The tool answers the pod directory it runs in (`/tmp/..` of its pod).
    let whereami = bundle("export default { execute() { return process.cwd(); } };");
    let ran_in = |frame: Frame| match frame {
        Frame::Final { value } => value.as_str().unwrap().to_owned(),
        other => panic!("{other:?}"),
    };
    let first = cluster
        .call(&mine, request(whereami.clone(), json!(null)))
        .await;
    let old_uid = cluster.pod_uid(&mine).unwrap();
    assert!(ran_in(first).contains(&old_uid));
    let old_ip = cluster.fake.pod(NS, &mine.runner_name()).unwrap()["status"]["podIP"].clone();

    // Another server deletes the pod, and another account's runner gets its
    // address (with a secret of its own).
    other.stop(&mine).await.unwrap();
    other.ensure(&theirs).await.unwrap();
    let theirs_pod = cluster.fake.pod(NS, &theirs.runner_name()).unwrap();
    assert_eq!(theirs_pod["status"]["podIP"], old_ip);

    // This server's channel to the old address now reaches the other
    // runner's worker, which refuses it; the call runs in a new pod of its own.
    let second = cluster.call(&mine, request(whereami, json!(null))).await;
    let new_uid = cluster.pod_uid(&mine).expect("the pod was created again");
    assert_ne!(new_uid, old_uid);
    let place = ran_in(second);
    assert!(place.contains(&new_uid), "ran in {place}");
}

#[tokio::test]
async fn a_dead_worker_is_started_again_in_the_same_pod() {
    let cluster = cluster(|_| {}).await;
    let key = key("acct_1");
    cluster.executor.ensure(&key).await.unwrap();
    let uid = cluster.pod_uid(&key);
    cluster.fake.kill_pod_processes(NS, &key.runner_name());
    let info = cluster.executor.ensure(&key).await.unwrap();
    assert!(info.started, "the worker had to be started again");
    assert_eq!(cluster.pod_uid(&key), uid);
    let answer = cluster.call(&key, request(bundle(ECHO), json!(2))).await;
    assert_eq!(answer, final_of(json!({"echo": 2})));
}

#[tokio::test]
async fn a_worker_that_dies_loading_a_bundle_is_not_run_again() {
    let cluster = cluster(|_| {}).await;
    let key = key("acct_1");
    let tool = r#"
if (process.argv[1].endsWith('worker.mjs')) process.exit(1);
export default { async *execute() { yield 'partial'; yield 'from the one-shot runner'; } };"#;
    let answer = cluster.call(&key, request(bundle(tool), json!(null))).await;
    assert!(
        matches!(answer, Frame::Error { ref name, .. } if name == "RunnerCrashed"),
        "{answer:?}"
    );
    let answer = cluster.call(&key, request(bundle(ECHO), json!(4))).await;
    assert_eq!(answer, final_of(json!({"echo": 4})));
}

#[tokio::test]
async fn a_hung_worker_is_killed_at_the_deadline_and_replaced() {
    let cluster = cluster(|_| {}).await;
    let key = key("acct_1");
    let mut hung = request(
        bundle("export default { execute() { for (;;) {} } };"),
        json!(null),
    );
    hung.deadline_ms = 300;
    let answer = terminal(cluster.executor.invoke(&key, hung).await.unwrap()).await;
    assert!(
        matches!(answer, Frame::Error { ref name, .. } if name == "DeadlineExceeded"),
        "{answer:?}"
    );
    let info = cluster.executor.ensure(&key).await.unwrap();
    assert!(
        info.started,
        "the hung worker was killed, so a new one starts"
    );
    let answer = cluster.call(&key, request(bundle(ECHO), json!(3))).await;
    assert_eq!(answer, final_of(json!({"echo": 3})));
}

#[tokio::test]
async fn two_accounts_never_share_a_pod() {
    let cluster = cluster(|_| {}).await;
    let tool = ToolId::generate();
    let a = ReservationKey::new(AccountId::parse("a").unwrap(), tool);
    let b = ReservationKey::new(AccountId::parse("b").unwrap(), tool);
    let pid = "export default { async execute() { return process.pid; } };";
    let in_a = cluster.call(&a, request(bundle(pid), json!(null))).await;
    let in_b = cluster.call(&b, request(bundle(pid), json!(null))).await;
    assert_ne!(a.runner_name(), b.runner_name());
    assert_ne!(cluster.pod_uid(&a), cluster.pod_uid(&b));
    assert!(cluster.pod_uid(&a).is_some() && cluster.pod_uid(&b).is_some());
    assert_ne!(in_a, in_b, "different worker processes");
}

#[tokio::test]
async fn an_idle_runner_scales_to_zero_and_resumes_with_its_cache() {
    let cluster = cluster(|settings| settings.idle_timeout = Duration::from_millis(400)).await;
    let key = key("acct_1");
    let cached = bundle(ECHO);
    let answer = cluster.call(&key, request(cached.clone(), json!(4))).await;
    assert_eq!(answer, final_of(json!({"echo": 4})));
    let uid = cluster.pod_uid(&key).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        cluster.executor.reap_idle().await.unwrap(),
        vec![key.runner_name()]
    );
    assert_eq!(cluster.pod_uid(&key), None, "scaled to zero");

    // Resumed as a new pod; the bundle is no longer sent, only its hash and
    // an unreachable URL: it can only come from the kept cache.
    let by_hash_only = BundleRef {
        sha256: cached.sha256.clone(),
        inline: None,
        url: Some("http://127.0.0.1:9/unreachable".into()),
    };
    let answer = cluster.call(&key, request(by_hash_only, json!(5))).await;
    assert_eq!(answer, final_of(json!({"echo": 5})));
    let resumed = cluster.pod_uid(&key).unwrap();
    assert_ne!(resumed, uid);
}

#[tokio::test]
async fn under_the_runner_budget_an_idle_pod_is_deleted_to_make_room() {
    use std::sync::Arc;
    use toolserver_sandbox::{BudgetSettings, FixedRunnerCaps, RunnerBudget};

    let cluster = cluster(|_| {}).await;
    let settings = BudgetSettings {
        max_live: 1,
        queue_wait: Duration::from_secs(20),
        queue_depth: 8,
    };
    let budget = RunnerBudget::new(
        Arc::new(cluster.executor.clone()),
        settings,
        Arc::new(FixedRunnerCaps(1)),
    );
    let (a, b) = (key("acct_a"), key("acct_b"));
    let frames = budget.invoke(&a, request(bundle(ECHO), json!(1))).await;
    assert_eq!(
        terminal(frames.unwrap()).await,
        final_of(json!({"echo": 1}))
    );
    assert!(cluster.pod_uid(&a).is_some());
    let frames = budget.invoke(&b, request(bundle(ECHO), json!(2))).await;
    assert_eq!(
        terminal(frames.unwrap()).await,
        final_of(json!({"echo": 2}))
    );
    assert_eq!(cluster.pod_uid(&a), None, "a's idle pod made room for b's");
    assert!(cluster.pod_uid(&b).is_some());
    assert_eq!(budget.usage(a.account()).live_runners, 0);
    assert_eq!(budget.usage(b.account()).live_runners, 1);
}

#[tokio::test]
async fn cancel_and_logs_reach_the_worker_through_exec() {
    let cluster = cluster(|_| {}).await;
    let key = key("acct_1");
    let slow = "export default { async execute(ctx) { console.log('started'); await new Promise((r, j) => { ctx.signal.addEventListener('abort', () => j(new Error('aborted'))); }); } };";
    let call = request(bundle(slow), json!(null));
    let call_id = call.call_id.clone();
    let mut frames = cluster.executor.invoke(&key, call).await.unwrap();
    assert!(
        matches!(next(&mut frames).await, Frame::Log { ref message, .. } if message == "started")
    );
    assert!(cluster.executor.cancel(&key, &call_id).await.unwrap());
    assert!(matches!(terminal(frames).await, Frame::Error { .. }));
    assert!(!cluster.executor.cancel(&key, "no-such-call").await.unwrap());
    let missing = cluster.executor.logs(&key, "no-such-call").await;
    assert!(missing.is_err(), "logs of an unknown call are refused");
}

/// A loopback HTTP server standing in for the server's completion route:
/// keeps each request's body and answers 200 `{}`.
struct Sink {
    url: String,
    bodies: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl Sink {
    async fn start() -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = bodies.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let mut bytes = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(read @ 1..) = socket.read(&mut buf).await else {
                            return;
                        };
                        bytes.extend_from_slice(&buf[..read]);
                        let text = String::from_utf8_lossy(&bytes).into_owned();
                        let Some((head, body)) = text.split_once("\r\n\r\n") else {
                            continue;
                        };
                        let length = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap())
                            })
                            .unwrap_or(0);
                        if body.len() < length {
                            continue;
                        }
                        record
                            .lock()
                            .unwrap()
                            .push(serde_json::from_str(body).unwrap());
                        let reply =
                            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
                        let _ = socket.write_all(reply.as_bytes()).await;
                        return;
                    }
                });
            }
        });
        Self { url, bodies }
    }

    async fn first(&self, within: Duration) -> Option<Value> {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Some(body) = self.bodies.lock().unwrap().first().cloned() {
                return Some(body);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

#[tokio::test]
async fn a_reaped_pod_is_reported_to_stop_listeners_and_leaves_the_live_count() {
    let cluster = cluster(|settings| settings.idle_timeout = Duration::from_millis(400)).await;
    let key = key("acct_1");
    let stopped = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = stopped.clone();
    cluster
        .executor
        .watch_stops(std::sync::Arc::new(move |key: &ReservationKey| {
            seen.lock().unwrap().push(key.clone())
        }));
    let answer = cluster.call(&key, request(bundle(ECHO), json!(1))).await;
    assert_eq!(answer, final_of(json!({"echo": 1})));
    assert_eq!(cluster.executor.usage(key.account()).live_runners, 1);
    assert_eq!(
        cluster.executor.usage_all(),
        vec![(key.account().clone(), cluster.executor.usage(key.account()))]
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        cluster.executor.reap_idle().await.unwrap(),
        vec![key.runner_name()]
    );
    assert_eq!(*stopped.lock().unwrap(), vec![key.clone()]);
    assert_eq!(cluster.executor.usage(key.account()).live_runners, 0);
}

#[tokio::test]
async fn a_pod_whose_worker_still_runs_a_detached_call_is_not_reaped() {
    let cluster = cluster(|settings| settings.idle_timeout = Duration::from_millis(300)).await;
    let key = key("acct_1");
    let sink = Sink::start().await;
    let slow = "export default { async execute() { await new Promise((r) => setTimeout(r, 2000)); return { slept: true }; } };";
    let mut call = request(bundle(slow), json!(null));
    call.async_meta = Some(json!({
        "resultId": "r-1",
        "completeUrl": format!("{}/sandbox-jobs/r-1/complete", sink.url),
        "completionToken": "t",
    }));
    assert_eq!(cluster.call(&key, call).await, Frame::Launched);
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Idle by its annotation and by this server's count, but its worker is busy.
    assert_eq!(
        cluster.executor.reap_idle().await.unwrap(),
        Vec::<String>::new()
    );
    assert!(cluster.pod_uid(&key).is_some());
    let completion = sink.first(Duration::from_secs(15)).await;
    assert_eq!(
        completion,
        Some(json!({"status": "completed", "response": {"slept": true}}))
    );
    // Once the call is over, the pod is idle like any other.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        cluster.executor.reap_idle().await.unwrap(),
        vec![key.runner_name()]
    );
}

fn last_used(cluster: &Cluster, key: &ReservationKey) -> time::OffsetDateTime {
    let pod = cluster.fake.pod(NS, &key.runner_name()).unwrap();
    let at = pod["metadata"]["annotations"]["toolserver.dev/last-used"]
        .as_str()
        .unwrap();
    time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339).unwrap()
}

#[tokio::test]
async fn a_long_call_keeps_marking_its_pod_used() {
    let cluster = cluster(|settings| settings.idle_timeout = Duration::from_millis(400)).await;
    let key = key("acct_1");
    let slow = "export default { async execute() { console.log('started'); await new Promise((r) => setTimeout(r, 1500)); return 'done'; } };";
    let mut frames = cluster
        .executor
        .invoke(&key, request(bundle(slow), json!(null)))
        .await
        .unwrap();
    assert!(matches!(next(&mut frames).await, Frame::Log { .. }));
    let at_start = last_used(&cluster, &key);
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Another server's reaper reads this annotation: it must not look idle mid-call.
    assert!(
        last_used(&cluster, &key) > at_start,
        "the last-used annotation was refreshed during the call"
    );
    assert_eq!(terminal(frames).await, final_of(json!("done")));
}
