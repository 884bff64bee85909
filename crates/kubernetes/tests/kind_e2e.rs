//! End to end on a kind cluster running `deploy/kubernetes/overlays/kind`
//! (`make kind-test` sets one up and runs this suite with `--ignored`).
//!
//! The suite talks to the server only over its public HTTP API (through a
//! port-forward) and reads the runner pods with a Kubernetes client. It needs:
//! - `TOOLSERVER_KIND_URL`: the server's base URL, e.g. `http://127.0.0.1:41234`;
//! - `TOOLSERVER_KIND_JWT_SECRET`: the HS256 secret the server verifies tokens with;
//! - `TOOLSERVER_KIND_MODEL_HOST`: an address of this host that pods reach
//!   (the kind network's gateway), where the scripted model listens;
//! - `KUBECONFIG`: the kind cluster's kubeconfig;
//! - optionally `TOOLSERVER_KIND_INTERNET=1`: the cluster reaches the
//!   internet, so a public address must answer through the egress proxy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, ListParams};
use serde_json::{json, Value};
use toolserver_testsupport::http::{hs256_token, request_json};
use toolserver_testsupport::{Reply, ScriptedModel};

const RUNNER_NAMESPACE: &str = "toolserver-runners";
const SERVER_NAMESPACE: &str = "toolserver";
/// Idle time of the kind overlay (TOOLSERVER_RUNNER_IDLE_SECS) plus room for
/// the reaper's period and the pod's termination.
const SCALE_TO_ZERO_WITHIN: Duration = Duration::from_secs(180);
/// A cold call creates the cache claim and the pod first.
const CALL_TIMEOUT_MS: u64 = 120_000;

fn env(name: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| panic!("{name} is not set: run this suite with `make kind-test`"))
}

/// A fresh account id, so reruns against a kept cluster never collide.
fn account(prefix: &str) -> String {
    format!("kind-{prefix}-{}", uuid::Uuid::new_v4().simple())
}

struct Cluster {
    base: String,
    secret: String,
    model_host: IpAddr,
    http: reqwest::Client,
    kube: kube::Client,
}

impl Cluster {
    async fn connect() -> Self {
        // Two rustls providers are linked; the Kubernetes client needs one chosen.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let base = env("TOOLSERVER_KIND_URL").trim_end_matches('/').to_owned();
        let model_host = env("TOOLSERVER_KIND_MODEL_HOST")
            .parse()
            .expect("TOOLSERVER_KIND_MODEL_HOST is an IP address");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(300))
            .build()
            .expect("an HTTP client");
        let kube = toolserver_kubernetes::cluster_client()
            .await
            .expect("a Kubernetes client from KUBECONFIG");
        let cluster = Self {
            base,
            secret: env("TOOLSERVER_KIND_JWT_SECRET"),
            model_host,
            http,
            kube,
        };
        let ready = cluster
            .http
            .get(format!("{}/readyz", cluster.base))
            .send()
            .await
            .expect("the server answers through the port-forward");
        assert!(ready.status().is_success(), "/readyz: {}", ready.status());
        cluster
    }

    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        account: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        let token = hs256_token(&self.secret, account);
        request_json(&self.http, method, &url, &token, body).await
    }

    /// Uploads `source` as tool `name` of `account`; the tool as stored.
    async fn upload(&self, account: &str, name: &str, source: &str) -> Value {
        self.upload_with(account, name, source, json!({})).await
    }

    /// Uploads `source` as tool `name` of `account` with the manifest
    /// fields of `extra` (e.g. `egress`); the tool as stored.
    async fn upload_with(&self, account: &str, name: &str, source: &str, extra: Value) -> Value {
        let mut manifest = json!({
            "name": name,
            "description": format!("the {name} tool of the kind suite"),
            "inputSchema": {"type": "object"},
            "bundle": base64::engine::general_purpose::STANDARD.encode(source),
        });
        for (field, value) in extra.as_object().into_iter().flatten() {
            manifest[field] = value.clone();
        }
        let (status, tool) = self
            .request(
                reqwest::Method::POST,
                "/accounts/me/tools",
                account,
                Some(manifest),
            )
            .await;
        assert_eq!(status, 201, "upload {name}: {tool}");
        tool
    }

    /// Runs `tool` and returns its output; fails on a tool error.
    async fn invoke(&self, account: &str, tool: &str, input: Value) -> Value {
        let (status, body) = self
            .request(
                reqwest::Method::POST,
                &format!("/accounts/me/tools/{tool}/invoke"),
                account,
                Some(json!({"input": input, "timeoutMs": CALL_TIMEOUT_MS})),
            )
            .await;
        assert_eq!(status, 200, "invoke {tool}: {body}");
        assert!(body.get("error").is_none(), "invoke {tool}: {body}");
        body["output"].clone()
    }

    /// Runs `tool` over SSE; the `(event, data)` pairs in arrival order.
    async fn invoke_streaming(
        &self,
        account: &str,
        tool: &str,
        input: Value,
    ) -> Vec<(String, Value)> {
        let response = self
            .http
            .post(format!("{}/accounts/me/tools/{tool}/invoke", self.base))
            .bearer_auth(hs256_token(&self.secret, account))
            .header("accept", "text/event-stream")
            .json(&json!({"input": input, "timeoutMs": CALL_TIMEOUT_MS}))
            .send()
            .await
            .expect("the server answers");
        assert_eq!(response.status(), 200);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        let mut text = String::new();
        let mut body = response.bytes_stream();
        while let Some(bytes) = body.next().await {
            text.push_str(&String::from_utf8_lossy(
                &bytes.expect("the stream goes on"),
            ));
        }
        text.split("\n\n")
            .filter(|event| !event.trim().is_empty() && !event.starts_with(':'))
            .map(|event| {
                let mut name = String::from("message");
                let mut data = String::new();
                for line in event.lines() {
                    if let Some(value) = line.strip_prefix("event: ") {
                        name = value.to_owned();
                    } else if let Some(value) = line.strip_prefix("data: ") {
                        data.push_str(value);
                    }
                }
                let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                (name, data)
            })
            .collect()
    }

    /// The runner pods of `tool` (by the backend's tool label).
    async fn runner_pods(&self, tool: &str) -> Vec<Pod> {
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), RUNNER_NAMESPACE);
        pods.list(&ListParams::default().labels(&format!("toolserver.dev/tool={tool}")))
            .await
            .expect("listing runner pods")
            .items
    }

    /// The one runner pod of `tool`: (name, uid).
    async fn runner_pod(&self, tool: &str) -> (String, String) {
        let pods = self.runner_pods(tool).await;
        assert_eq!(pods.len(), 1, "one runner pod for {tool}");
        let meta = &pods[0].metadata;
        (
            meta.name.clone().expect("a pod name"),
            meta.uid.clone().expect("a pod uid"),
        )
    }

    async fn cache_claim(&self, pod_name: &str) -> Option<PersistentVolumeClaim> {
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.kube.clone(), RUNNER_NAMESPACE);
        claims
            .get_opt(&format!("{pod_name}-cache"))
            .await
            .expect("reading the cache claim")
    }

    /// The IP of a pod in the server namespace labelled `name`.
    async fn server_namespace_pod_ip(&self, name: &str) -> String {
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), SERVER_NAMESPACE);
        let pods = pods
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={name}")))
            .await
            .expect("listing pods")
            .items;
        pods.iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .filter_map(|pod| pod.status.as_ref())
            .filter(|status| status.phase.as_deref() == Some("Running"))
            .find_map(|status| status.pod_ip.clone())
            .unwrap_or_else(|| panic!("a running {name} pod with an IP"))
    }
}

const WHO_AM_I: &str = r#"
import { hostname } from 'node:os';
export default {
  async execute(ctx, input) {
    return {
      pod: hostname(),
      uid: process.getuid(),
      gid: process.getgid(),
      env: Object.keys(process.env).sort(),
      echo: input,
    };
  },
};
"#;

const COUNTER: &str = r#"
export default {
  async *execute(ctx, input) {
    for (let step = 1; step <= input.steps; step++) {
      ctx.log(`step ${step}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
      yield { step };
    }
  },
};
"#;

#[tokio::test]
#[ignore = "needs a kind cluster: make kind-test"]
async fn sync_and_streaming_calls_share_one_hardened_runner_pod() {
    let cluster = Cluster::connect().await;
    let acct = account("reuse");
    let tool = cluster.upload(&acct, "who_am_i", WHO_AM_I).await;
    let tool_id = tool["toolId"].as_str().unwrap();

    let first = cluster.invoke(&acct, tool_id, json!({"n": 1})).await;
    let (pod_name, pod_uid) = cluster.runner_pod(tool_id).await;
    assert_eq!(
        first["pod"],
        pod_name.as_str(),
        "the call ran in the runner pod"
    );
    assert_eq!(first["echo"], json!({"n": 1}));
    assert_eq!(
        (first["uid"].as_u64(), first["gid"].as_u64()),
        (Some(10001), Some(10001))
    );
    // No server secret or setting reaches uploaded code.
    let env: Vec<&str> = first["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for secret in [
        "DATABASE_URL",
        "TOOLSERVER_JWT_SECRET",
        "TOOLSERVER_SECRETS_KEY",
        "TOOLSERVER_BUNDLE_URL_SECRET",
    ] {
        assert!(
            !env.contains(&secret),
            "{secret} is visible to the tool: {env:?}"
        );
    }

    let second = cluster.invoke(&acct, tool_id, json!({"n": 2})).await;
    assert_eq!(second["pod"], pod_name.as_str());
    assert_eq!(
        cluster.runner_pod(tool_id).await,
        (pod_name.clone(), pod_uid.clone()),
        "the same pod serves the second call"
    );

    // The runner pod is the hardened one the backend builds.
    let pod = cluster.runner_pods(tool_id).await.remove(0);
    let spec = pod.spec.expect("a pod spec");
    assert_eq!(spec.automount_service_account_token, Some(false));
    let labels = pod.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("app.kubernetes.io/name").map(String::as_str),
        Some("toolserver-runner")
    );
    let container = &spec.containers[0];
    let security = container
        .security_context
        .clone()
        .expect("a container securityContext");
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));

    // A streaming tool of the same account: chunks as they come, then the result.
    let counter = cluster.upload(&acct, "counter", COUNTER).await;
    let counter_id = counter["toolId"].as_str().unwrap();
    let events = cluster
        .invoke_streaming(&acct, counter_id, json!({"steps": 3}))
        .await;
    let chunks: Vec<&Value> = events
        .iter()
        .filter(|(name, _)| name == "chunk")
        .map(|(_, data)| data)
        .collect();
    assert_eq!(
        chunks,
        [
            &json!({"step": 1}),
            &json!({"step": 2}),
            &json!({"step": 3})
        ],
        "{events:?}"
    );
    let logs: Vec<&Value> = events
        .iter()
        .filter(|(name, _)| name == "log")
        .map(|(_, data)| &data["message"])
        .collect();
    assert_eq!(
        logs,
        [&json!("step 1"), &json!("step 2"), &json!("step 3")],
        "{events:?}"
    );
    assert_eq!(
        events
            .last()
            .map(|(name, data)| (name.as_str(), data.clone())),
        Some(("result", json!({"output": {"step": 3}})))
    );
    let (counter_pod, counter_uid) = cluster.runner_pod(counter_id).await;
    assert_ne!(counter_pod, pod_name, "another tool, another runner");

    // Streaming again reuses the counter's pod.
    let again = cluster
        .invoke_streaming(&acct, counter_id, json!({"steps": 1}))
        .await;
    assert_eq!(
        again.last().map(|(name, _)| name.as_str()),
        Some("result"),
        "{again:?}"
    );
    assert_eq!(
        cluster.runner_pod(counter_id).await,
        (counter_pod, counter_uid)
    );
}

#[tokio::test]
#[ignore = "needs a kind cluster: make kind-test"]
async fn an_idle_runner_scales_to_zero_and_comes_back_with_its_cache_claim() {
    let cluster = Cluster::connect().await;
    let acct = account("idle");
    let tool = cluster.upload(&acct, "who_am_i", WHO_AM_I).await;
    let tool_id = tool["toolId"].as_str().unwrap();

    let first = cluster.invoke(&acct, tool_id, json!({})).await;
    let (pod_name, pod_uid) = cluster.runner_pod(tool_id).await;
    assert_eq!(first["pod"], pod_name.as_str());
    let claim = cluster
        .cache_claim(&pod_name)
        .await
        .expect("the runner's cache claim");
    let claim_uid = claim.metadata.uid.clone().expect("a claim uid");

    let started = Instant::now();
    while !cluster.runner_pods(tool_id).await.is_empty() {
        assert!(
            started.elapsed() < SCALE_TO_ZERO_WITHIN,
            "the idle runner pod {pod_name} was not deleted within {SCALE_TO_ZERO_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!(
        "runner pod {pod_name} deleted {:?} after its call",
        started.elapsed()
    );
    let kept = cluster
        .cache_claim(&pod_name)
        .await
        .expect("the cache claim outlives the pod");
    assert_eq!(kept.metadata.uid.as_deref(), Some(claim_uid.as_str()));

    let second = cluster.invoke(&acct, tool_id, json!({})).await;
    let (new_name, new_uid) = cluster.runner_pod(tool_id).await;
    assert_eq!(second["pod"], new_name.as_str());
    assert_eq!(
        new_name, pod_name,
        "the runner's name is derived from its key"
    );
    assert_ne!(
        new_uid, pod_uid,
        "a new pod serves the call after scale to zero"
    );
    let reused = cluster
        .cache_claim(&pod_name)
        .await
        .expect("the cache claim");
    assert_eq!(
        reused.metadata.uid.as_deref(),
        Some(claim_uid.as_str()),
        "the new pod mounts the same claim"
    );
    let mounted = cluster
        .runner_pods(tool_id)
        .await
        .remove(0)
        .spec
        .expect("a spec")
        .volumes
        .unwrap_or_default();
    assert!(
        mounted.iter().any(|v| v
            .persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name == format!("{pod_name}-cache"))),
        "{mounted:?}"
    );
}

const PROBE: &str = r#"
import net from 'node:net';
import dns from 'node:dns/promises';

function connect(name, host, port, ms) {
  return new Promise((resolve) => {
    const started = Date.now();
    let done = false;
    const socket = net.connect({ host, port });
    const finish = (outcome, detail) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ name, host, port, outcome, detail: detail ?? null, ms: Date.now() - started });
    };
    const timer = setTimeout(() => finish('timeout'), ms);
    socket.once('connect', () => finish('connected'));
    socket.once('error', (err) => finish('error', err.code || err.message));
  });
}

export default {
  async execute(ctx, input) {
    const targets = [...input.targets];
    let resolved;
    try {
      resolved = (await dns.lookup(input.apiName, { all: true })).map((answer) => answer.address);
      for (const address of resolved) targets.push({ name: 'api-by-dns', host: address, port: 443 });
    } catch (err) {
      resolved = { error: err.code || err.message };
    }
    const envHost = process.env.KUBERNETES_SERVICE_HOST;
    if (envHost) {
      targets.push({ name: 'api-by-env', host: envHost, port: Number(process.env.KUBERNETES_SERVICE_PORT || 443) });
    }
    const probes = await Promise.all(targets.map((t) => connect(t.name, t.host, t.port, input.timeoutMs)));
    return { resolved, probes };
  },
};
"#;

#[tokio::test]
#[ignore = "needs a kind cluster: make kind-test"]
async fn runner_pods_reach_nothing_directly_but_dns_and_the_egress_proxy() {
    let cluster = Cluster::connect().await;
    let api: Api<Service> = Api::namespaced(cluster.kube.clone(), "default");
    let api_ip = api
        .get("kubernetes")
        .await
        .expect("the API service")
        .spec
        .and_then(|spec| spec.cluster_ip)
        .expect("the API service's ClusterIP");
    let server_ip = cluster.server_namespace_pod_ip("toolserver").await;
    let postgres_ip = cluster.server_namespace_pod_ip("postgres").await;
    let nodes: Api<Node> = Api::all(cluster.kube.clone());
    let node_ip = nodes
        .list(&ListParams::default())
        .await
        .expect("listing nodes")
        .items
        .iter()
        .flat_map(|node| {
            node.status
                .iter()
                .flat_map(|s| s.addresses.iter().flatten())
        })
        .find(|address| address.type_ == "InternalIP")
        .map(|address| address.address.clone())
        .expect("a node's InternalIP");

    let acct = account("net");
    let tool = cluster.upload(&acct, "probe", PROBE).await;
    let tool_id = tool["toolId"].as_str().unwrap();
    let output = cluster
        .invoke(
            &acct,
            tool_id,
            json!({
                "apiName": "kubernetes.default.svc",
                "timeoutMs": 5000,
                "targets": [
                    {"name": "api-cluster-ip", "host": api_ip, "port": 443},
                    {"name": "postgres-pod", "host": postgres_ip, "port": 5432},
                    {"name": "node-kubelet", "host": node_ip, "port": 10250},
                    {"name": "metadata", "host": "169.254.169.254", "port": 80},
                    {"name": "server-pod", "host": server_ip, "port": 8080},
                    {"name": "public", "host": "1.1.1.1", "port": 443},
                ],
            }),
        )
        .await;
    println!("probes: {output:#}");

    // Cluster DNS is allowed, so the API's name resolves (to its ClusterIP).
    let resolved = output["resolved"]
        .as_array()
        .unwrap_or_else(|| panic!("kubernetes.default.svc resolves: {output}"));
    assert!(resolved.contains(&json!(api_ip)), "{resolved:?}");

    let probes = output["probes"].as_array().unwrap();
    let outcome = |probe: &Value| probe["outcome"].as_str().unwrap().to_owned();
    let mut names = Vec::new();
    for probe in probes {
        let name = probe["name"].as_str().unwrap();
        names.push(name.to_owned());
        // Public addresses and the server too: with the egress proxy, a raw
        // socket reaches nothing (fetch goes through the proxy).
        assert_ne!(
            outcome(probe),
            "connected",
            "a runner pod reached {name}: {probe}"
        );
    }
    for wanted in [
        "api-cluster-ip",
        "api-by-dns",
        "postgres-pod",
        "node-kubelet",
        "metadata",
        "server-pod",
        "public",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "no {wanted} probe: {names:?}"
        );
    }
}

const FETCHER: &str = r#"
export default {
  async execute(ctx, input) {
    const out = {};
    for (const [name, url] of Object.entries(input.urls)) {
      try {
        const response = await fetch(url, { signal: AbortSignal.timeout(input.timeoutMs) });
        out[name] = `ok: ${response.status}`;
      } catch (err) {
        out[name] = `refused: ${err.cause?.message ?? err.message}`;
      }
    }
    return out;
  },
};
"#;

#[tokio::test]
#[ignore = "needs a kind cluster: make kind-test"]
async fn fetch_goes_through_the_egress_proxy_under_the_tools_allow_list() {
    let cluster = Cluster::connect().await;
    let server_ip = cluster.server_namespace_pod_ip("toolserver").await;
    let postgres_ip = cluster.server_namespace_pod_ip("postgres").await;
    let internet = std::env::var("TOOLSERVER_KIND_INTERNET").is_ok_and(|v| v == "1");
    let acct = account("egress");

    let open = cluster.upload(&acct, "open", FETCHER).await;
    let output = cluster
        .invoke(
            &acct,
            open["toolId"].as_str().unwrap(),
            json!({
                "timeoutMs": 10_000,
                "urls": {
                    "server": format!("http://{server_ip}:8080/healthz"),
                    "postgres": format!("http://{postgres_ip}:5432/"),
                    "metadata": "http://169.254.169.254/",
                    "public": "https://example.com/",
                },
            }),
        )
        .await;
    println!("open tool: {output:#}");
    for name in ["server", "postgres", "metadata"] {
        let outcome = output[name].as_str().unwrap();
        assert!(
            outcome.starts_with("refused: egress to ") && outcome.contains("not a public address"),
            "{name}: {output:#}"
        );
    }
    if internet {
        assert_eq!(output["public"], "ok: 200", "{output:#}");
    }

    let narrow = cluster
        .upload_with(
            &acct,
            "narrow",
            FETCHER,
            json!({"egress": {"allow": ["example.com"]}}),
        )
        .await;
    let output = cluster
        .invoke(
            &acct,
            narrow["toolId"].as_str().unwrap(),
            json!({
                "timeoutMs": 10_000,
                "urls": {
                    "listed": "https://example.com/",
                    "unlisted": "https://example.org/",
                },
            }),
        )
        .await;
    println!("narrow tool: {output:#}");
    assert_eq!(
        output["unlisted"],
        "refused: egress to example.org:443 refused: example.org is not in the tool's egress allow list",
        "{output:#}"
    );
    if internet {
        assert_eq!(output["listed"], "ok: 200", "{output:#}");
    }
}

#[tokio::test]
#[ignore = "needs a kind cluster: make kind-test"]
async fn two_accounts_with_the_same_bundle_get_different_pods() {
    let cluster = Cluster::connect().await;
    let (a, b) = (account("tenant-a"), account("tenant-b"));
    let tool_a = cluster.upload(&a, "who_am_i", WHO_AM_I).await;
    let tool_b = cluster.upload(&b, "who_am_i", WHO_AM_I).await;
    assert_eq!(
        tool_a["bundleSha256"], tool_b["bundleSha256"],
        "one bundle, stored once"
    );
    let (id_a, id_b) = (
        tool_a["toolId"].as_str().unwrap(),
        tool_b["toolId"].as_str().unwrap(),
    );

    let (ran_a, ran_b) = tokio::join!(
        cluster.invoke(&a, id_a, json!({"who": "a"})),
        cluster.invoke(&b, id_b, json!({"who": "b"})),
    );
    let (pod_a, uid_a) = cluster.runner_pod(id_a).await;
    let (pod_b, uid_b) = cluster.runner_pod(id_b).await;
    assert_eq!(ran_a["pod"], pod_a.as_str());
    assert_eq!(ran_b["pod"], pod_b.as_str());
    assert_ne!(pod_a, pod_b);
    assert_ne!(uid_a, uid_b);
    let account_label = |pods: Vec<Pod>| {
        pods[0]
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .get("toolserver.dev/account")
            .cloned()
            .expect("an account label")
    };
    assert_ne!(
        account_label(cluster.runner_pods(id_a).await),
        account_label(cluster.runner_pods(id_b).await)
    );
    // Neither account can reach the other's tool.
    let (status, _) = cluster
        .request(
            reqwest::Method::POST,
            &format!("/accounts/me/tools/{id_a}/invoke"),
            &b,
            Some(json!({"input": {}})),
        )
        .await;
    assert_eq!(status, 404);
}

const JOB: &str = r#"
export default {
  async execute(ctx, input) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    return { finished: input.job };
  },
};
"#;

#[tokio::test]
#[ignore = "needs a kind cluster: make kind-test"]
async fn a_detached_async_call_completes_through_the_callback() {
    let cluster = Cluster::connect().await;
    // The server pod calls the model on this host, through the kind network.
    let model = ScriptedModel::start_on(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).await;
    let model_url = format!("http://{}:{}/v1", cluster.model_host, model.port());
    let model_id = format!("kind-detached-{}", uuid::Uuid::new_v4().simple());
    model.script(
        &model_id,
        vec![
            Reply::tool_call("c1", "job", json!({"job": "in-kind"})),
            Reply::text("The job started."),
            Reply::text("The job finished."),
            Reply::text("The job finished."),
        ],
    );
    let acct = account("async");
    let tool = cluster.upload(&acct, "job", JOB).await;
    let tool_id = tool["toolId"].as_str().unwrap().to_owned();
    let (status, agent) = cluster
        .request(
            reqwest::Method::POST,
            "/agents",
            &acct,
            Some(json!({
                "name": "kind-detached",
                "config": {
                    "model": {"provider": "openai", "modelId": model_id},
                    "provider": {"openai": {"apiKey": "sk-kind-test", "baseUrl": model_url}},
                    "systemPrompt": "You are a test agent.",
                    "tools": { &tool_id: {"async": true} },
                },
            })),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    let agent_id = agent["agentId"].as_str().unwrap();

    let (status, accepted) = cluster
        .request(
            reqwest::Method::POST,
            &format!("/agents/{agent_id}/async"),
            &acct,
            Some(json!({
                "id": format!("conv-{}", uuid::Uuid::new_v4().simple()),
                "messages": [{
                    "id": uuid::Uuid::new_v4().to_string(),
                    "role": "user",
                    "parts": [{"type": "text", "text": "run the job"}],
                }],
                "trigger": "submit-message",
            })),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let status_id = accepted["statusId"].as_str().unwrap();

    let started = Instant::now();
    let done = loop {
        let (status, body) = cluster
            .request(
                reqwest::Method::GET,
                &format!("/async/{status_id}"),
                &acct,
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        match body["status"].as_str() {
            Some("completed") => break body,
            Some("failed") => panic!("the detached turn failed: {body}"),
            _ => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the detached turn did not complete (model requests: {}): {body}",
            model.request_count(&model_id)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };

    let parts = done["messages"].as_array().unwrap().last().unwrap()["parts"]
        .as_array()
        .unwrap()
        .clone();
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert!(text.ends_with("The job finished."), "{done}");
    let pending: Vec<&Value> = parts.iter().filter(|p| p["type"] == "tool-job").collect();
    assert_eq!(pending.len(), 1, "{parts:?}");
    assert_eq!(pending[0]["output"]["status"], "pending", "{parts:?}");
    let arrived: Vec<&Value> = parts
        .iter()
        .filter(|p| p["type"] == "tool-async_status")
        .collect();
    assert_eq!(arrived.len(), 1, "{parts:?}");
    assert_eq!(
        arrived[0]["output"]["result"],
        json!({"finished": "in-kind"}),
        "{parts:?}"
    );
    // The continuation told the model the result the runner posted back.
    let last = model
        .requests(&model_id)
        .last()
        .cloned()
        .expect("model requests");
    let told = last["messages"].to_string();
    assert!(told.contains("in-kind"), "{told}");
}
