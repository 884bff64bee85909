//! The real binary with `TOOLSERVER_EXECUTOR=kubernetes`, its kubeconfig
//! pointing at a local server that plays the Kubernetes API and kubelet (exec
//! runs the real Node worker). Everything above the executor is unchanged: a
//! direct call, and a detached turn whose async calls complete through the
//! token-authenticated callback and continue the model once.

use std::path::PathBuf;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_kubernetes::manifests::runner_network_policy;
use toolserver_sandbox::WorkerAssets;
use toolserver_testsupport::kube::{FakeCluster, FakeClusterOptions};
use toolserver_testsupport::wait::until;
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::server::{script, Setup};

const NS: &str = "runners";

fn kubeconfig(dir: &std::path::Path, server: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\n"
    );
    std::fs::write(&path, config).unwrap();
    path
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_api_runs_tools_in_pods_unchanged(pool: PgPool) {
    let scratch = tempfile::Builder::new()
        .prefix("k8s")
        .tempdir_in("/tmp")
        .unwrap();
    let assets = WorkerAssets::install(&scratch.path().join("worker")).unwrap();
    let cluster = FakeCluster::start(FakeClusterOptions {
        node_binary: PathBuf::from("node"),
        worker_dir: assets.dir().to_owned(),
        root: scratch.path().join("r"),
    });
    cluster.insert(
        &format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"),
        serde_json::to_value(runner_network_policy(NS)).unwrap(),
    );
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
