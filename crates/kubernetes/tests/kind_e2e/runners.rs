//! Runner pods: sync and streaming calls share one hardened pod, an idle
//! runner scales to zero and comes back with its cache claim, and two
//! accounts with the same bundle get different pods.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use crate::{account, Cluster};

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

/// Idle time of the kind overlay (TOOLSERVER_RUNNER_IDLE_SECS) plus room for
/// the reaper's period and the pod's termination.
const SCALE_TO_ZERO_WITHIN: Duration = Duration::from_secs(180);

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
