//! The warm pool against the fake cluster (real HTTP, real Node workers):
//! warm pods made up to the pool's size, claimed by a new key's first call
//! under a resource-version precondition and replaced, never shared, shed
//! for the runner budget, swept when their server is gone, and deleted
//! when their pool is stopped or their executor is dropped.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::Api;
use serde_json::{json, Value};
use toolserver_domain::{AccountId, ToolId};
use toolserver_kubernetes::manifests::{
    self, claim_patch, runner_network_policy, runner_pod, warm_pod,
};
use toolserver_kubernetes::warm::{Claim, WarmPods};
use toolserver_kubernetes::{CacheVolume, KubernetesExecutor, KubernetesSettings};
use toolserver_sandbox::{
    BudgetSettings, Executor, FixedRunnerCaps, Frame, FrameStream, ReservationKey, RunnerBudget,
    WarmRoom, WorkerAssets,
};
use toolserver_testsupport::kube::{FakeCluster, FakeClusterOptions};

use super::exec_transport::{bundle, key, request, NS};

const ECHO: &str = "export default { async execute(ctx, input) { return { echo: input }; } };";

/// A tool that answers the pod directory it runs in (`/tmp/..` of its pod,
/// named by the pod's uid).
const WHEREAMI: &str = "export default { execute() { return process.cwd(); } };";

/// A fake cluster and a client for it; executors are made on demand.
struct Fixture {
    fake: FakeCluster,
    client: kube::Client,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let dir = tempfile::Builder::new()
        .prefix("k8w")
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
    Fixture {
        fake,
        client,
        _dir: dir,
    }
}

fn settings() -> KubernetesSettings {
    let mut settings = KubernetesSettings::new(NS, "toolserver-runner:test");
    settings.kill_grace = Duration::from_millis(500);
    settings
}

fn ephemeral() -> KubernetesSettings {
    let mut settings = settings();
    settings.cache = CacheVolume::Ephemeral {
        size: "64Mi".into(),
    };
    settings
}

impl Fixture {
    async fn executor(&self, settings: KubernetesSettings) -> KubernetesExecutor {
        KubernetesExecutor::new(self.client.clone(), settings)
            .await
            .unwrap()
    }

    fn api(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// The pods whose labels match `selector`, by name.
    async fn pods(&self, selector: &str) -> Vec<Pod> {
        let mut pods = self
            .api()
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items;
        pods.sort_by_key(|pod| pod.metadata.name.clone());
        pods
    }

    /// The names of the warm pods in the namespace.
    async fn warm_names(&self) -> Vec<String> {
        self.pods("toolserver.dev/warm=true")
            .await
            .into_iter()
            .filter_map(|pod| pod.metadata.name)
            .collect()
    }

    /// The pods claimed for `key`.
    async fn claimed(&self, key: &ReservationKey) -> Vec<Pod> {
        self.pods(&format!("toolserver.dev/runner={}", key.runner_name()))
            .await
    }

    /// The requests received since the first `since`, as `METHOD path`.
    fn requests_since(&self, since: usize) -> Vec<(String, Option<Value>)> {
        self.fake.requests()[since..]
            .iter()
            .map(|r| (format!("{} {}", r.method, r.path), r.body.clone()))
            .collect()
    }
}

/// Waits until `done` holds, for at most 20 s.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `executor` holds `n` ready warm pods; their names.
async fn ready(executor: &KubernetesExecutor, n: usize) -> Vec<String> {
    until(&format!("{n} warm pods ready"), || {
        executor.warm_pods().len() == n
    })
    .await;
    executor.warm_pods()
}

async fn terminal(mut frames: FrameStream) -> Frame {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), frames.recv())
            .await
            .expect("a frame in time")
            .expect("the stream goes on");
        if frame.is_terminal() {
            return frame;
        }
    }
}

fn final_string(frame: Frame) -> String {
    match frame {
        Frame::Final { value } => value.as_str().unwrap().to_owned(),
        other => panic!("expected a final frame, got {other:?}"),
    }
}

fn labels(pod: &Value) -> Value {
    pod["metadata"]["labels"].clone()
}

#[test]
fn a_warm_pod_is_a_hardened_runner_pod_of_no_key_with_an_ephemeral_cache() {
    let mut settings = settings();
    settings.runtime_class = Some("gvisor".into());
    let secret = "s".repeat(64);
    let warm = serde_json::to_value(warm_pod(&settings, "tr-warm-1", "r1", "t0", &secret)).unwrap();
    let runner =
        serde_json::to_value(runner_pod(&settings, &key("acct_1"), "t0", &secret)).unwrap();
    // The same spec as a key's pod (hardening, resources, runtime class,
    // channel, egress wiring), but for the cache: a key's claim is not
    // known yet, so an emptyDir of the cache's size.
    let mut expected = runner["spec"].clone();
    expected["volumes"][1] = json!({"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}});
    assert_eq!(warm["spec"], expected);
    assert_eq!(
        warm["metadata"],
        json!({
            "name": "tr-warm-1",
            "namespace": NS,
            "labels": {
                "app.kubernetes.io/name": "toolserver-runner",
                "app.kubernetes.io/managed-by": "toolserver",
                "toolserver.dev/warm": "true",
                "toolserver.dev/replica": "r1",
            },
            "annotations": {"toolserver.dev/warm-heartbeat": "t0"},
        })
    );
}

#[test]
fn the_claim_binds_a_warm_pod_to_its_key_only_at_the_version_seen() {
    let key = ReservationKey::new(
        AccountId::parse("org:team@example.com").unwrap(),
        ToolId::generate(),
    );
    let runner = serde_json::to_value(runner_pod(&settings(), &key, "t1", "s")).unwrap();
    let mut labels = runner["metadata"]["labels"].clone();
    labels["toolserver.dev/runner"] = json!(key.runner_name());
    labels["toolserver.dev/warm"] = Value::Null;
    labels["toolserver.dev/replica"] = Value::Null;
    let mut annotations = runner["metadata"]["annotations"].clone();
    annotations["toolserver.dev/claimed-at"] = json!("t1");
    annotations["toolserver.dev/warm-heartbeat"] = Value::Null;
    assert_eq!(
        claim_patch(&key, "42", "t1"),
        json!({"metadata": {"resourceVersion": "42", "labels": labels, "annotations": annotations}})
    );
}

#[tokio::test]
async fn the_pool_fills_to_its_size_with_pods_whose_worker_runs() {
    let fixture = fixture().await;
    let executor = fixture.executor(settings()).await;
    executor.start_warm_pool(2);
    let names = ready(&executor, 2).await;
    assert!(
        names.iter().all(|name| name.starts_with("tr-warm-")),
        "{names:?}"
    );
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(fixture.warm_names().await, sorted);
    for name in &names {
        let pod = fixture.fake.pod(NS, name).unwrap();
        let labels = labels(&pod);
        assert_eq!(labels["toolserver.dev/warm"], "true");
        assert!(labels["toolserver.dev/replica"].is_string());
        assert!(labels["toolserver.dev/account"].is_null(), "{labels}");
        assert_eq!(fixture.fake.exec_count(name), 1, "its worker was launched");
    }
    executor.tend_warm_pool().await.unwrap();
    assert_eq!(fixture.warm_names().await, sorted, "no more than the size");
}

#[tokio::test]
async fn a_new_keys_first_call_claims_a_warm_pod_and_a_replacement_starts() {
    let fixture = fixture().await;
    let executor = fixture.executor(settings()).await;
    executor.start_warm_pool(1);
    let warm = ready(&executor, 1).await.remove(0);
    let execs = fixture.fake.exec_count(&warm);
    let key = key("acct_1");
    let since = fixture.fake.requests().len();

    let info = executor.ensure(&key).await.unwrap();
    assert_eq!(info.name, key.runner_name());
    assert!(info.started);
    let answer = terminal(
        executor
            .invoke(&key, request(bundle(ECHO), json!(1)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        answer,
        Frame::Final {
            value: json!({"echo": 1})
        }
    );

    // The warm pod is the key's now, its pre-started worker serves it, and
    // no pod of the key's name was made.
    assert!(fixture.fake.pod(NS, &key.runner_name()).is_none());
    assert_eq!(
        fixture.fake.exec_count(&warm),
        execs,
        "no launch on the call path"
    );
    let pod = fixture.fake.pod(NS, &warm).unwrap();
    let labels = labels(&pod);
    assert_eq!(labels["toolserver.dev/account"], "acct_1");
    assert_eq!(labels["toolserver.dev/tool"], key.tool().to_string());
    assert_eq!(labels["toolserver.dev/runner"], key.runner_name());
    assert!(labels["toolserver.dev/warm"].is_null(), "{labels}");
    assert!(labels["toolserver.dev/replica"].is_null(), "{labels}");
    assert_eq!(
        pod["metadata"]["annotations"]["toolserver.dev/account"],
        "acct_1"
    );
    let made = fixture.requests_since(since);
    // The claim was conditional on the pod's version.
    let patched = format!("PATCH /api/v1/namespaces/{NS}/pods/{warm}");
    assert!(made
        .iter()
        .any(|(request, body)| request.starts_with(&patched)
            && body.as_ref().unwrap()["metadata"]["resourceVersion"].is_string()));
    let created: Vec<String> = made
        .iter()
        .filter(|(request, _)| request.starts_with(&format!("POST /api/v1/namespaces/{NS}/pods")))
        .map(|(_, body)| {
            body.as_ref().unwrap()["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(
        created.iter().all(|name| name.starts_with("tr-warm-")),
        "only warm pods were created: {created:?}"
    );
    // The key's cache claim is made at its first start, for its later ones.
    assert!(made.iter().any(|(request, _)| request.starts_with(&format!(
        "POST /api/v1/namespaces/{NS}/persistentvolumeclaims"
    ))));

    // A replacement joins the pool; the claimed pod never returns to it.
    until("a replacement", || {
        executor
            .warm_pods()
            .first()
            .is_some_and(|name| *name != warm)
    })
    .await;
    assert_eq!(fixture.warm_names().await, executor.warm_pods());

    // Later calls reuse the claimed pod's channel: no API request at all.
    let since = fixture.fake.requests().len();
    let answer = terminal(
        executor
            .invoke(&key, request(bundle(ECHO), json!(2)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        answer,
        Frame::Final {
            value: json!({"echo": 2})
        }
    );
    assert!(fixture.requests_since(since).is_empty());
    // Cancel and logs find the worker in the claimed pod.
    assert!(!executor.cancel(&key, "no-such-call").await.unwrap());
}

#[tokio::test]
async fn concurrent_first_calls_never_share_a_warm_pod() {
    let fixture = fixture().await;
    let executor = fixture.executor(ephemeral()).await;
    executor.start_warm_pool(4);
    let warm = ready(&executor, 4).await;
    let keys: Vec<ReservationKey> = (0..4).map(|n| key(&format!("acct_{n}"))).collect();
    let calls = keys.iter().map(|key| {
        let executor = executor.clone();
        let key = key.clone();
        async move {
            let frames = executor
                .invoke(&key, request(bundle(WHEREAMI), json!(null)))
                .await;
            final_string(terminal(frames.unwrap()).await)
        }
    });
    let places = futures::future::join_all(calls).await;
    let mut claimed = Vec::new();
    for (key, place) in keys.iter().zip(&places) {
        let pods = fixture.claimed(key).await;
        assert_eq!(pods.len(), 1, "one pod per key");
        let name = pods[0].metadata.name.clone().unwrap();
        assert!(warm.contains(&name), "{name} was a warm pod");
        let uid = pods[0].metadata.uid.clone().unwrap();
        assert!(
            place.contains(&uid),
            "the call ran in its key's pod: {place}"
        );
        claimed.push(name);
    }
    claimed.sort();
    claimed.dedup();
    assert_eq!(claimed.len(), 4, "no pod serves two keys");
}

#[tokio::test]
async fn of_two_claims_of_one_warm_pod_exactly_one_wins() {
    let fixture = fixture().await;
    let pods = WarmPods::new(fixture.api(), ephemeral());
    pods.create("tr-warm-contested", "r1").await.unwrap();
    let version = pods.wait_ready("tr-warm-contested").await.unwrap();
    let (a, b) = (key("acct_a"), key("acct_b"));
    let (first, second) = tokio::join!(
        pods.claim("tr-warm-contested", &version, &a),
        pods.claim("tr-warm-contested", &version, &b),
    );
    let (won, lost, winner) = match (first.unwrap(), second.unwrap()) {
        (Claim::Won(pod), other) => (pod, other, a),
        (other, Claim::Won(pod)) => (pod, other, b),
        outcome => panic!("no claim won: {outcome:?}"),
    };
    assert!(matches!(lost, Claim::Changed), "{lost:?}");
    assert!(manifests::belongs_to(&won.metadata, &winner));
    let stored = fixture.fake.pod(NS, "tr-warm-contested").unwrap();
    assert_eq!(
        labels(&stored)["toolserver.dev/runner"],
        winner.runner_name()
    );
    // Its old version claims nothing, and a pod that is gone cannot be had.
    assert!(matches!(
        pods.claim("tr-warm-contested", &version, &key("acct_c"))
            .await
            .unwrap(),
        Claim::Changed
    ));
    assert!(matches!(
        pods.claim("tr-warm-none", "1", &key("acct_c"))
            .await
            .unwrap(),
        Claim::Gone
    ));
}

#[tokio::test]
async fn two_servers_claiming_for_one_key_settle_on_one_pod() {
    let fixture = fixture().await;
    let (one, two) = (
        fixture.executor(ephemeral()).await,
        fixture.executor(ephemeral()).await,
    );
    one.start_warm_pool(1);
    two.start_warm_pool(1);
    ready(&one, 1).await;
    ready(&two, 1).await;
    let key = key("acct_1");
    let ask = |executor: &KubernetesExecutor| {
        let (executor, key) = (executor.clone(), key.clone());
        async move {
            let frames = executor
                .invoke(&key, request(bundle(WHEREAMI), json!(null)))
                .await;
            final_string(terminal(frames.unwrap()).await)
        }
    };
    let (here, there) = tokio::join!(ask(&one), ask(&two));
    assert_eq!(here, there, "both servers run the key in one pod");
    let pods = fixture.claimed(&key).await;
    assert_eq!(pods.len(), 1, "the later claim was deleted");
    assert!(here.contains(pods[0].metadata.uid.as_deref().unwrap()));
}

#[tokio::test]
async fn a_pool_of_zero_starts_runners_as_before() {
    let fixture = fixture().await;
    let executor = fixture.executor(settings()).await;
    executor.start_warm_pool(0);
    executor.tend_warm_pool().await.unwrap();
    let key = key("acct_1");
    let since = fixture.fake.requests().len();
    let info = executor.ensure(&key).await.unwrap();
    assert!(info.started);
    let pods_api = format!("/api/v1/namespaces/{NS}/pods");
    let made: Vec<String> = fixture
        .requests_since(since)
        .into_iter()
        .map(|(request, _)| request)
        .filter(|request| request.contains(&pods_api) && !request.contains("/exec?"))
        .filter(|request| !request.ends_with("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dtoolserver%2Ctoolserver.dev%2Fwarm%3Dtrue"))
        .collect();
    let own = format!("{pods_api}/{}", key.runner_name());
    assert_eq!(
        made,
        vec![
            format!("GET {own}"),
            format!("POST {pods_api}"),
            format!("GET {own}"),
            format!("PATCH {own}"),
        ]
    );
    assert!(executor.warm_pods().is_empty());
    assert!(fixture.warm_names().await.is_empty());
}

/// A budget's room for warm pods, `cap` at most.
struct Room {
    cap: usize,
    held: AtomicUsize,
}

impl WarmRoom for Room {
    fn take(&self) -> bool {
        self.held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
                (held < self.cap).then_some(held + 1)
            })
            .is_ok()
    }

    fn give_back(&self) {
        self.held.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn warm_pods_start_only_into_room_and_a_shed_deletes_one() {
    let fixture = fixture().await;
    let executor = fixture.executor(ephemeral()).await;
    let room = Arc::new(Room {
        cap: 2,
        held: AtomicUsize::new(0),
    });
    executor.govern_warm(room.clone());
    executor.start_warm_pool(3);
    let warm = ready(&executor, 2).await;
    executor.tend_warm_pool().await.unwrap();
    assert_eq!(fixture.warm_names().await.len(), 2, "no room for a third");
    assert_eq!(room.held.load(Ordering::SeqCst), 2);

    assert!(executor.shed_warm().await);
    assert_eq!(
        room.held.load(Ordering::SeqCst),
        1,
        "its room was given back"
    );
    assert_eq!(executor.warm_pods(), warm[1..]);
    assert!(
        fixture.fake.pod(NS, &warm[0]).is_none(),
        "the oldest was deleted"
    );
    assert!(executor.shed_warm().await);
    assert!(!executor.shed_warm().await, "none left to shed");
    assert_eq!(room.held.load(Ordering::SeqCst), 0);
    assert!(fixture.warm_names().await.is_empty());
}

#[tokio::test]
async fn under_the_runner_budget_warm_pods_hold_room_and_one_is_shed_for_a_runner() {
    let fixture = fixture().await;
    let executor = fixture.executor(ephemeral()).await;
    let settings = BudgetSettings {
        max_live: 2,
        queue_wait: Duration::from_secs(20),
        queue_depth: 8,
    };
    let budget = RunnerBudget::new(
        Arc::new(executor.clone()),
        settings,
        Arc::new(FixedRunnerCaps(2)),
    );
    executor.start_warm_pool(3);
    let warm = ready(&executor, 2).await;
    // The two warm pods hold the server's whole room: a's first call sheds
    // one of them, then claims the other.
    let a = key("acct_a");
    let frames = budget.invoke(&a, request(bundle(ECHO), json!(1))).await;
    assert_eq!(
        terminal(frames.unwrap()).await,
        Frame::Final {
            value: json!({"echo": 1})
        }
    );
    let claimed = fixture.claimed(&a).await;
    assert_eq!(claimed.len(), 1);
    let name = claimed[0].metadata.name.clone().unwrap();
    assert!(warm.contains(&name), "a claimed a warm pod: {name}");
    assert!(fixture.fake.pod(NS, &a.runner_name()).is_none());
    let shed: Vec<&String> = warm.iter().filter(|warm| **warm != name).collect();
    assert!(
        fixture.fake.pod(NS, shed[0]).is_none(),
        "the other was shed"
    );
    // a's runner and one warm pod fill the room.
    until("a replacement", || {
        executor
            .warm_pods()
            .first()
            .is_some_and(|name| !warm.contains(name))
    })
    .await;
    executor.tend_warm_pool().await.unwrap();
    assert_eq!(fixture.warm_names().await, executor.warm_pods());
    assert_eq!(budget.usage(a.account()).live_runners, 1);
}

#[tokio::test]
async fn warm_pods_no_server_vouches_for_are_deleted() {
    let fixture = fixture().await;
    let collection = format!("/api/v1/namespaces/{NS}/pods");
    let long_ago = "2020-01-01T00:00:00Z";
    let now = toolserver_kubernetes::pods::now_rfc3339();
    let plant = |name: &str, replica: &str, heartbeat: &str| {
        let pod = warm_pod(&ephemeral(), name, replica, heartbeat, "s");
        fixture
            .fake
            .insert(&collection, serde_json::to_value(pod).unwrap());
    };
    plant("tr-warm-dead", "gone", long_ago);
    plant("tr-warm-live", "elsewhere", &now);
    let executor = fixture.executor(ephemeral()).await;
    executor.start_warm_pool(1);
    let mine = ready(&executor, 1).await;
    executor.tend_warm_pool().await.unwrap();
    let mut expected = vec!["tr-warm-live".to_owned(), mine[0].clone()];
    expected.sort();
    assert_eq!(fixture.warm_names().await, expected);

    // Its own pods are vouched for on every round.
    let before = fixture.fake.pod(NS, &mine[0]).unwrap()["metadata"]["annotations"]
        ["toolserver.dev/warm-heartbeat"]
        .clone();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    executor.tend_warm_pool().await.unwrap();
    let after = fixture.fake.pod(NS, &mine[0]).unwrap()["metadata"]["annotations"]
        ["toolserver.dev/warm-heartbeat"]
        .clone();
    assert_ne!(before, after);
}

#[tokio::test]
async fn a_warm_pod_that_goes_away_is_replaced() {
    let fixture = fixture().await;
    let executor = fixture.executor(ephemeral()).await;
    executor.start_warm_pool(1);
    let gone = ready(&executor, 1).await.remove(0);
    fixture
        .api()
        .delete(&gone, &DeleteParams::default())
        .await
        .unwrap();
    executor.tend_warm_pool().await.unwrap();
    until("a replacement", || {
        executor
            .warm_pods()
            .first()
            .is_some_and(|name| *name != gone)
    })
    .await;
    assert_eq!(fixture.warm_names().await, executor.warm_pods());
}

#[tokio::test]
async fn a_stopped_pool_deletes_its_pods_and_starts_no_more() {
    let fixture = fixture().await;
    let executor = fixture.executor(ephemeral()).await;
    executor.start_warm_pool(2);
    ready(&executor, 2).await;
    executor.stop_warm_pool().await;
    assert!(executor.warm_pods().is_empty());
    assert!(fixture.warm_names().await.is_empty());
    // A round of tending keeps the pool empty.
    executor.tend_warm_pool().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(fixture.warm_names().await.is_empty(), "the pool refilled");
    let key = key("acct_1");
    let info = executor.ensure(&key).await.unwrap();
    assert_eq!(info.name, key.runner_name());
    assert!(
        fixture.fake.pod(NS, &key.runner_name()).is_some(),
        "a key's first start makes its own pod"
    );
}

#[tokio::test]
async fn dropping_the_executor_deletes_its_warm_pods() {
    let fixture = fixture().await;
    let executor = fixture.executor(ephemeral()).await;
    executor.start_warm_pool(2);
    ready(&executor, 2).await;
    drop(executor);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !fixture.warm_names().await.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "warm pods left behind"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
