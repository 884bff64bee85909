//! The backend's Kubernetes requests against a mocked API: the exact pod
//! spec, labels and security context, the NetworkPolicy, and the create /
//! reconnect / resume / scale-to-zero decisions.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use toolserver_domain::{AccountId, ToolId};
use toolserver_kubernetes::manifests::{self, runner_network_policy, runner_pod};
use toolserver_kubernetes::pods::{classify, EnsuredPod, PodState, RunnerPods};
use toolserver_kubernetes::{CacheVolume, KubernetesExecutor, KubernetesSettings};
use toolserver_sandbox::{ReservationKey, SandboxError};

use crate::mock::mocked;

const NS: &str = "runners";

/// The runner secret of pods these tests serve.
const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn settings() -> KubernetesSettings {
    let mut settings = KubernetesSettings::new(NS, "registry.example/toolserver-runner:1.2.3");
    settings.ready_timeout = Duration::from_secs(5);
    settings.idle_timeout = Duration::from_secs(60);
    settings
}

fn key(account: &str) -> ReservationKey {
    ReservationKey::new(AccountId::parse(account).unwrap(), ToolId::generate())
}

/// The pod as the API would answer it: the backend's spec plus metadata and status.
fn served_pod(key: &ReservationKey, uid: &str, phase: &str, ready: bool) -> Value {
    let mut pod =
        serde_json::to_value(runner_pod(&settings(), key, "2026-01-01T00:00:00Z", SECRET)).unwrap();
    pod["metadata"]["uid"] = json!(uid);
    pod["metadata"]["resourceVersion"] = json!("7");
    pod["status"] = json!({
        "phase": phase,
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        "containerStatuses": [{"name": "runner", "ready": ready, "restartCount": 0, "image": "i", "imageID": ""}],
    });
    pod
}

/// Runs `ensure` in a task, so the test can answer its requests.
fn spawn_ensure(
    pods: &RunnerPods,
    key: &ReservationKey,
) -> tokio::task::JoinHandle<Result<EnsuredPod, SandboxError>> {
    let (pods, key) = (pods.clone(), key.clone());
    tokio::spawn(async move { pods.ensure(&key).await })
}

fn pod_path(key: &ReservationKey) -> String {
    format!("/api/v1/namespaces/{NS}/pods/{}", key.runner_name())
}

#[test]
fn the_runner_pod_is_hardened_and_labelled() {
    let key = ReservationKey::new(
        AccountId::parse("org:team@example.com").unwrap(),
        ToolId::generate(),
    );
    let mut settings = settings();
    settings.runtime_class = Some("gvisor".into());
    let pod =
        serde_json::to_value(runner_pod(&settings, &key, "2026-01-01T00:00:00Z", SECRET)).unwrap();
    let name = key.runner_name();
    let tool = key.tool().to_string();
    let account_hash = pod["metadata"]["labels"]["toolserver.dev/account"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        account_hash.starts_with("sha256-") && account_hash.len() == 47,
        "{account_hash}"
    );
    let hardened = json!({
        "runAsNonRoot": true, "runAsUser": 10001, "runAsGroup": 10001,
        "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false, "privileged": false,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    assert_eq!(
        pod,
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {
                    "app.kubernetes.io/name": "toolserver-runner",
                    "app.kubernetes.io/managed-by": "toolserver",
                    "toolserver.dev/account": account_hash,
                    "toolserver.dev/tool": tool,
                },
                "annotations": {
                    "toolserver.dev/account": "org:team@example.com",
                    "toolserver.dev/tool": tool,
                    "toolserver.dev/last-used": "2026-01-01T00:00:00Z",
                },
            },
            "spec": {
                "automountServiceAccountToken": false,
                "enableServiceLinks": false,
                "restartPolicy": "Always",
                "runtimeClassName": "gvisor",
                "terminationGracePeriodSeconds": 5,
                "securityContext": {
                    "runAsNonRoot": true, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [{
                    "name": "runner",
                    "image": "registry.example/toolserver-runner:1.2.3",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/usr/bin/tini", "--", "node", "/opt/toolserver/worker/hold.mjs"],
                    "env": [
                        {"name": "HOME", "value": "/tmp"},
                        {"name": "TMPDIR", "value": "/tmp"},
                        {"name": "NODE_ENV", "value": "production"},
                        {"name": "TOOLSERVER_CACHE_ROOTS", "value": "/cache/tools"},
                        {"name": "TOOLSERVER_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "TOOLSERVER_CHANNEL_PORT", "value": "8790"},
                        {"name": "TOOLSERVER_CHANNEL_SECRET", "value": SECRET},
                    ],
                    "ports": [{"name": "worker", "containerPort": 8790, "protocol": "TCP"}],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"cpu": "1", "memory": "512Mi"},
                    },
                    "securityContext": hardened,
                    "volumeMounts": [
                        {"name": "tmp", "mountPath": "/tmp"},
                        {"name": "cache", "mountPath": "/cache"},
                    ],
                }],
                "volumes": [
                    {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
                    {"name": "cache", "persistentVolumeClaim": {"claimName": format!("{name}-cache")}},
                ],
            },
        })
    );
}

#[test]
fn label_safe_accounts_are_labelled_verbatim_and_ephemeral_caches_use_empty_dirs() {
    let key = key("acct_1");
    let mut settings = settings();
    settings.cache = CacheVolume::Ephemeral {
        size: "64Mi".into(),
    };
    let pod = serde_json::to_value(runner_pod(&settings, &key, "t", SECRET)).unwrap();
    assert_eq!(
        pod["metadata"]["labels"]["toolserver.dev/account"],
        "acct_1"
    );
    assert_eq!(
        pod["spec"]["volumes"][1],
        json!({"name": "cache", "emptyDir": {"sizeLimit": "64Mi"}})
    );
    assert!(manifests::cache_claim(&settings, &key).is_none());
}

#[test]
fn the_network_policy_admits_only_the_server_and_denies_private_egress() {
    let policy = serde_json::to_value(runner_network_policy(NS)).unwrap();
    assert_eq!(
        policy,
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "toolserver-runners", "namespace": NS},
            "spec": {
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "toolserver-runner"}},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{
                    "from": [{
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "toolserver"}},
                        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "toolserver"}},
                    }],
                    "ports": [{"protocol": "TCP", "port": 8790}],
                }],
                "egress": [
                    {
                        "to": [{
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                    },
                    {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [
                        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8",
                        "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16",
                    ]}}]},
                    {"to": [{"ipBlock": {"cidr": "::/0", "except": ["::1/128", "fc00::/7", "fe80::/10"]}}]},
                ],
            },
        })
    );
}

#[test]
fn pods_are_classified_by_owner_phase_and_readiness() {
    let key = key("a");
    let parse = |value: Value| serde_json::from_value::<Pod>(value).unwrap();
    assert_eq!(classify(None, &key), PodState::Absent);
    assert_eq!(
        classify(Some(&parse(served_pod(&key, "u1", "Running", true))), &key),
        PodState::Ready { uid: "u1".into() }
    );
    assert_eq!(
        classify(Some(&parse(served_pod(&key, "u1", "Pending", false))), &key),
        PodState::Starting
    );
    assert_eq!(
        classify(Some(&parse(served_pod(&key, "u1", "Failed", false))), &key),
        PodState::Finished { uid: "u1".into() }
    );
    let mut terminating = served_pod(&key, "u1", "Running", true);
    terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(
        classify(Some(&parse(terminating)), &key),
        PodState::Terminating
    );
    let other = self::key("b");
    assert_eq!(
        classify(
            Some(&parse(served_pod(&other, "u1", "Running", true))),
            &key
        ),
        PodState::Foreign
    );
    let mut pulling = served_pod(&key, "u1", "Pending", false);
    pulling["status"]["containerStatuses"][0]["state"] =
        json!({"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}});
    assert!(matches!(
        classify(Some(&parse(pulling)), &key),
        PodState::Broken { reason } if reason.contains("ImagePullBackOff")
    ));
}

#[tokio::test]
async fn an_absent_runner_gets_its_claim_and_pod_then_waits_until_ready() {
    let (client, mut api) = mocked();
    let key = key("acct_1");
    let pods = RunnerPods::new(client, settings());
    let ensure = spawn_ensure(&pods, &key);
    api.expect("GET", &pod_path(&key))
        .await
        .fail(404, "NotFound");
    let claim = api
        .expect(
            "POST",
            &format!("/api/v1/namespaces/{NS}/persistentvolumeclaims?"),
        )
        .await;
    assert_eq!(
        claim.body["metadata"]["name"],
        format!("{}-cache", key.runner_name())
    );
    assert_eq!(
        claim.body["spec"],
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}})
    );
    let body = claim.body.clone();
    claim.reply(201, body);
    let create = api
        .expect("POST", &format!("/api/v1/namespaces/{NS}/pods?"))
        .await;
    let mut sent = create.body.clone();
    assert!(sent["metadata"]["annotations"]["toolserver.dev/last-used"]
        .as_str()
        .is_some_and(|at| at.ends_with('Z')));
    sent["metadata"]["annotations"]["toolserver.dev/last-used"] = json!("x");
    let secret = sent["spec"]["containers"][0]["env"][6]["value"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(secret.len(), 64, "a fresh 32-byte secret: {secret}");
    assert!(secret.bytes().all(|b| b.is_ascii_hexdigit()));
    let mut expected = serde_json::to_value(runner_pod(&settings(), &key, "x", &secret)).unwrap();
    expected["metadata"]["annotations"]["toolserver.dev/last-used"] = json!("x");
    assert_eq!(sent, expected);
    create.reply(201, served_pod(&key, "uid-1", "Pending", false));
    api.expect("GET", &pod_path(&key))
        .await
        .reply(200, served_pod(&key, "uid-1", "Pending", false));
    api.expect("GET", &pod_path(&key))
        .await
        .reply(200, served_pod(&key, "uid-1", "Running", true));
    let ensured = ensure.await.unwrap().unwrap();
    assert_eq!((ensured.uid.as_str(), ensured.created), ("uid-1", true));
}

#[tokio::test]
async fn a_ready_runner_is_reused_with_a_single_read() {
    let (client, mut api) = mocked();
    let key = key("acct_1");
    let pods = RunnerPods::new(client, settings());
    let ensure = spawn_ensure(&pods, &key);
    api.expect("GET", &pod_path(&key))
        .await
        .reply(200, served_pod(&key, "uid-1", "Running", true));
    let ensured = ensure.await.unwrap().unwrap();
    assert_eq!((ensured.uid.as_str(), ensured.created), ("uid-1", false));
}

#[tokio::test]
async fn an_ended_pod_is_deleted_by_uid_and_resumed_on_the_kept_claim() {
    let (client, mut api) = mocked();
    let key = key("acct_1");
    let pods = RunnerPods::new(client, settings());
    let ensure = spawn_ensure(&pods, &key);
    api.expect("GET", &pod_path(&key))
        .await
        .reply(200, served_pod(&key, "old", "Failed", false));
    let delete = api.expect("DELETE", &format!("{}?", pod_path(&key))).await;
    assert_eq!(delete.body["preconditions"], json!({"uid": "old"}));
    delete.reply(200, served_pod(&key, "old", "Failed", false));
    api.expect("GET", &pod_path(&key))
        .await
        .fail(404, "NotFound");
    api.expect(
        "POST",
        &format!("/api/v1/namespaces/{NS}/persistentvolumeclaims?"),
    )
    .await
    .fail(409, "AlreadyExists");
    api.expect("POST", &format!("/api/v1/namespaces/{NS}/pods?"))
        .await
        .reply(201, served_pod(&key, "new", "Pending", false));
    api.expect("GET", &pod_path(&key))
        .await
        .reply(200, served_pod(&key, "new", "Running", true));
    let ensured = ensure.await.unwrap().unwrap();
    assert_eq!((ensured.uid.as_str(), ensured.created), ("new", true));
}

#[tokio::test]
async fn a_pod_of_another_key_or_with_a_bad_image_is_refused() {
    let (client, mut api) = mocked();
    let key = key("acct_1");
    let pods = RunnerPods::new(client, settings());
    let ensure = spawn_ensure(&pods, &key);
    api.expect("GET", &pod_path(&key))
        .await
        .reply(200, served_pod(&self::key("other"), "u", "Running", true));
    let err = ensure.await.unwrap().unwrap_err().to_string();
    assert!(err.contains("belongs to another runner"), "{err}");

    let ensure = spawn_ensure(&pods, &key);
    let mut pulling = served_pod(&key, "u", "Pending", false);
    pulling["status"]["containerStatuses"][0]["state"] =
        json!({"waiting": {"reason": "ErrImagePull", "message": "not found"}});
    api.expect("GET", &pod_path(&key)).await.reply(200, pulling);
    let err = ensure.await.unwrap().unwrap_err().to_string();
    assert!(err.contains("ErrImagePull: not found"), "{err}");
}

#[tokio::test]
async fn idle_runners_are_deleted_only_if_unchanged_and_not_busy() {
    let (client, mut api) = mocked();
    let pods = RunnerPods::new(client, settings());
    let (idle, fresh, busy, raced) = (key("a"), key("b"), key("c"), key("d"));
    let busy_name = busy.runner_name();
    let reap = tokio::spawn(async move { pods.reap_idle(&[busy_name], |_| async { false }).await });
    let list = api
        .expect(
            "GET",
            &format!(
                "/api/v1/namespaces/{NS}/pods?&labelSelector=app.kubernetes.io%2Fname%3Dtoolserver-runner%2Capp.kubernetes.io%2Fmanaged-by%3Dtoolserver%2Ctoolserver.dev%2Fwarm%21%3Dtrue"
            ),
        )
        .await;
    let mut fresh_pod = served_pod(&fresh, "u-b", "Running", true);
    fresh_pod["metadata"]["annotations"]["toolserver.dev/last-used"] =
        json!(toolserver_kubernetes::pods::now_rfc3339());
    list.reply(
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": [
            served_pod(&idle, "u-a", "Running", true),
            fresh_pod,
            served_pod(&busy, "u-c", "Running", true),
            served_pod(&raced, "u-d", "Running", true),
        ]}),
    );
    let delete = api
        .expect(
            "DELETE",
            &format!("/api/v1/namespaces/{NS}/pods/{}?", idle.runner_name()),
        )
        .await;
    assert_eq!(
        delete.body["preconditions"],
        json!({"uid": "u-a", "resourceVersion": "7"})
    );
    delete.reply(200, served_pod(&idle, "u-a", "Running", true));
    // Touched by another server between the list and the delete.
    api.expect(
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/{}?", raced.runner_name()),
    )
    .await
    .fail(409, "Conflict");
    assert_eq!(reap.await.unwrap().unwrap(), vec![idle.runner_name()]);
}

#[tokio::test]
async fn an_idle_pod_whose_worker_still_runs_calls_is_marked_used_not_deleted() {
    let (client, mut api) = mocked();
    let pods = RunnerPods::new(client, settings());
    let (working, idle) = (key("a"), key("b"));
    let working_name = working.runner_name();
    let probed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let asked = probed.clone();
    let reap = tokio::spawn(async move {
        pods.reap_idle(&[], |pod| {
            asked.lock().unwrap().push(pod.clone());
            let busy = pod == working_name;
            async move { busy }
        })
        .await
    });
    let list = api
        .expect(
            "GET",
            &format!(
                "/api/v1/namespaces/{NS}/pods?&labelSelector=app.kubernetes.io%2Fname%3Dtoolserver-runner%2Capp.kubernetes.io%2Fmanaged-by%3Dtoolserver%2Ctoolserver.dev%2Fwarm%21%3Dtrue"
            ),
        )
        .await;
    list.reply(
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": [
            served_pod(&working, "u-a", "Running", true),
            served_pod(&idle, "u-b", "Running", true),
        ]}),
    );
    // Both are idle by their annotation, but the first one's worker still
    // runs a detached call: it is marked used, not deleted.
    let touch = api
        .expect("PATCH", &format!("{}?", pod_path(&working)))
        .await;
    assert!(touch.body["metadata"]["annotations"]["toolserver.dev/last-used"].is_string());
    touch.reply(200, served_pod(&working, "u-a", "Running", true));
    api.expect("DELETE", &format!("{}?", pod_path(&idle)))
        .await
        .reply(200, served_pod(&idle, "u-b", "Running", true));
    assert_eq!(reap.await.unwrap().unwrap(), vec![idle.runner_name()]);
    assert_eq!(
        *probed.lock().unwrap(),
        vec![working.runner_name(), idle.runner_name()]
    );
}

#[tokio::test]
async fn a_call_marks_its_runner_used_with_a_merge_patch() {
    let (client, mut api) = mocked();
    let key = key("a");
    let pods = RunnerPods::new(client, settings());
    let name = key.runner_name();
    let touch = tokio::spawn(async move { pods.touch(&name).await });
    let patch = api.expect("PATCH", &format!("{}?", pod_path(&key))).await;
    let at = patch.body["metadata"]["annotations"]["toolserver.dev/last-used"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(at.ends_with('Z'), "{at}");
    assert_eq!(
        patch.body,
        json!({"metadata": {"annotations": {"toolserver.dev/last-used": at}}})
    );
    patch.reply(200, served_pod(&key, "u", "Running", true));
    touch.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_backend_refuses_to_start_without_its_network_policy() {
    let (client, mut api) = mocked();
    let start = tokio::spawn(KubernetesExecutor::new(client, settings()));
    api.expect(
        "GET",
        &format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/toolserver-runners"),
    )
    .await
    .fail(404, "NotFound");
    let err = start.await.unwrap().err().expect("must refuse").to_string();
    assert!(
        err.contains("NetworkPolicy toolserver-runners is missing"),
        "{err}"
    );

    let (client, mut api) = mocked();
    let start = tokio::spawn(KubernetesExecutor::new(client, settings()));
    api.expect(
        "GET",
        &format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/toolserver-runners"),
    )
    .await
    .reply(
        200,
        serde_json::to_value(runner_network_policy(NS)).unwrap(),
    );
    assert!(start.await.unwrap().is_ok());
}
