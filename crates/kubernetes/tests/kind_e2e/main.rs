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
//!
//! The cluster as the tests see it is here; the tests are in [`runners`],
//! [`egress`] and [`detached`].
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams};
use serde_json::{json, Value};
use toolserver_testsupport::http::{hs256_token, request_json};

mod detached;
mod egress;
mod runners;

const RUNNER_NAMESPACE: &str = "toolserver-runners";
const SERVER_NAMESPACE: &str = "toolserver";

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
