//! Runner egress: pods reach nothing directly but DNS and the egress proxy,
//! and `fetch` goes through the proxy under the tool's allow list.

use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, ListParams};
use serde_json::{json, Value};

use crate::{account, Cluster};

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
