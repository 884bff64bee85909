//! The real binary with `TOOLSERVER_EXECUTOR=kubernetes`, its kubeconfig
//! pointing at a local server that plays the Kubernetes API and kubelet (exec
//! runs the real Node worker). Everything above the executor is unchanged: a
//! direct call, and a detached turn whose async calls complete through the
//! token-authenticated callback and continue the model once. With a warm
//! pool, a tool's first call claims a warm pod, a replacement takes its
//! place, and a server stopped by SIGTERM deletes the warm pods it kept.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_kubernetes::manifests::runner_network_policy;
use toolserver_sandbox::WorkerAssets;
use toolserver_testsupport::http::free_port;
use toolserver_testsupport::kube::{FakeCluster, FakeClusterOptions};
use toolserver_testsupport::wait::until;
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::metrics::Scrape;
use crate::server::{script, terminate, Setup};

const NS: &str = "runners";

fn kubeconfig(dir: &std::path::Path, server: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\n"
    );
    std::fs::write(&path, config).unwrap();
    path
}

/// A fake cluster whose runner namespace has its network policy, with the
/// worker installed under `scratch`.
fn cluster(scratch: &Path) -> FakeCluster {
    let assets = WorkerAssets::install(&scratch.join("worker")).unwrap();
    let cluster = FakeCluster::start(FakeClusterOptions {
        node_binary: PathBuf::from("node"),
        worker_dir: assets.dir().to_owned(),
        root: scratch.join("r"),
    });
    cluster.insert(
        &format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"),
        serde_json::to_value(runner_network_policy(NS)).unwrap(),
    );
    cluster
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("k8s")
        .tempdir_in("/tmp")
        .unwrap()
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_api_runs_tools_in_pods_unchanged(pool: PgPool) {
    let scratch = scratch();
    let cluster = cluster(scratch.path());
    let setup = Setup::new(&pool);
    let config = kubeconfig(setup.dir.path(), &cluster.url());
    // No warm pods: the tool's first call creates its own pod, which this
    // test looks for (the pool is tested in toolserver-kubernetes).
    let server = setup
        .start_with(
            50,
            &[
                ("TOOLSERVER_EXECUTOR", "kubernetes"),
                ("TOOLSERVER_K8S_NAMESPACE", NS),
                ("KUBECONFIG", config.to_str().unwrap()),
                ("TOOLSERVER_RUNNER_WARM_POOL", "0"),
            ],
        )
        .await;

    let echo = "export default { async execute(ctx, input) { return { echo: input.q }; } };";
    let tool = setup.upload_tool(&server, "echo", echo).await;
    let result = setup
        .invoke(&server, &tool, json!({"input": {"q": "in a pod"}}))
        .await;
    assert_eq!(result["output"], json!({"echo": "in a pod"}), "{result}");
    let pods: Vec<Value> = cluster
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "POST" && r.path.starts_with(&format!("/api/v1/namespaces/{NS}/pods"))
        })
        .filter_map(|r| r.body)
        .collect();
    assert_eq!(pods.len(), 1, "one runner pod for the tool");
    assert_eq!(pods[0]["metadata"]["labels"]["toolserver.dev/tool"], tool);
    assert_eq!(
        pods[0]["metadata"]["annotations"]["toolserver.dev/account"],
        "crash"
    );

    let model = ScriptedModel::start().await;
    script(&model, Reply::text("Both finished in pods."));
    let id = setup.detached_turn(&server, &model).await;
    until("the detached turn to complete", || async {
        setup.status(&server, &id).await["status"] == "completed"
    })
    .await;
    let answer = setup.status(&server, &id).await;
    let text = answer["messages"].to_string();
    assert!(text.contains("Both finished in pods."), "{answer}");
    assert!(
        text.contains(r#"\"finished\":\"a\""#) || text.contains(r#""finished":"a""#),
        "{answer}"
    );
    assert_eq!(model.request_count("crash"), 3, "one continuation pass");
}

/// The pods of the runner namespace whose labels match `selector`.
async fn pods(setup: &Setup, cluster: &FakeCluster, selector: &str) -> Vec<Value> {
    let list: Value = setup
        .client()
        .get(format!("{}/api/v1/namespaces/{NS}/pods", cluster.url()))
        .query(&[("labelSelector", selector)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["items"].as_array().unwrap().clone()
}

/// The names of `pods`, sorted.
fn names(pods: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = pods
        .iter()
        .map(|pod| pod["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// The value of the Kubernetes backend's series `family` in a scrape of
/// `metrics` (0 when it has none).
async fn kubernetes_sample(setup: &Setup, metrics: &str, family: &str) -> f64 {
    Scrape::take(setup, metrics)
        .await
        .value(family, &[("backend", "kubernetes")])
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_first_call_claims_a_warm_pod_and_sigterm_deletes_the_pool(pool: PgPool) {
    let scratch = scratch();
    let cluster = cluster(scratch.path());
    let setup = Setup::new(&pool);
    let config = kubeconfig(setup.dir.path(), &cluster.url());
    let metrics = format!("http://127.0.0.1:{}", free_port());
    let mut server = setup
        .start_with(
            50,
            &[
                ("TOOLSERVER_EXECUTOR", "kubernetes"),
                ("TOOLSERVER_K8S_NAMESPACE", NS),
                ("KUBECONFIG", config.to_str().unwrap()),
                ("TOOLSERVER_RUNNER_WARM_POOL", "2"),
                ("TOOLSERVER_METRICS_BIND", &metrics["http://".len()..]),
            ],
        )
        .await;
    until("two warm pods ready", || async {
        kubernetes_sample(&setup, &metrics, "toolserver_runner_warm_ready").await == 2.0
    })
    .await;
    let warm = names(&pods(&setup, &cluster, "toolserver.dev/warm=true").await);
    assert_eq!(warm.len(), 2, "{warm:?}");

    let echo = "export default { async execute(ctx, input) { return { echo: input.q }; } };";
    let tool = setup.upload_tool(&server, "echo", echo).await;
    let since = cluster.requests().len();
    let result = setup
        .invoke(&server, &tool, json!({"input": {"q": "in a warm pod"}}))
        .await;
    assert_eq!(
        result["output"],
        json!({"echo": "in a warm pod"}),
        "{result}"
    );

    // One of the warm pods is the tool's now; no pod was made for it.
    let claimed = names(&pods(&setup, &cluster, &format!("toolserver.dev/tool={tool}")).await);
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert!(warm.contains(&claimed[0]), "{claimed:?} is not of {warm:?}");
    let pod = cluster.pod(NS, &claimed[0]).unwrap();
    assert!(
        pod["metadata"]["labels"]["toolserver.dev/warm"].is_null(),
        "{pod}"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["toolserver.dev/account"],
        "crash"
    );
    let created: Vec<String> = cluster.requests()[since..]
        .iter()
        .filter(|r| r.method == "POST" && r.path == format!("/api/v1/namespaces/{NS}/pods"))
        .filter_map(|r| {
            r.body.as_ref()?["metadata"]["name"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(
        created.iter().all(|name| name.starts_with("tr-warm-")),
        "only warm pods were created: {created:?}"
    );
    assert_eq!(
        kubernetes_sample(&setup, &metrics, "toolserver_runner_warm_claims_total").await,
        1.0
    );

    // A replacement joins the pool; the claimed pod never returns to it.
    until("a replacement warm pod", || async {
        let now = names(&pods(&setup, &cluster, "toolserver.dev/warm=true").await);
        now.len() == 2
            && !now.contains(&claimed[0])
            && kubernetes_sample(&setup, &metrics, "toolserver_runner_warm_ready").await == 2.0
    })
    .await;

    // Stopped by SIGTERM, the server deletes the warm pods it kept, and
    // leaves the tool's runner pod to the next server.
    let status = terminate(&mut server.child).await;
    assert!(status.success(), "{status}");
    let left = names(&pods(&setup, &cluster, "toolserver.dev/warm=true").await);
    assert!(left.is_empty(), "warm pods left behind: {left:?}");
    assert!(
        cluster.pod(NS, &claimed[0]).is_some(),
        "the runner pod stays"
    );
}
