//! What the kubelet does for a pod: start its main process, report its
//! status, and serve its log.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::answers::{not_found, now};
use super::processes::{Container, PodRuntime};
use super::{FakeClusterOptions, Shared, Store};

/// The path of the pods collection of `namespace`.
pub(super) fn collection(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods")
}

/// Prepares the directories of the newly stamped `pod`, starts its main
/// process and sets its status: `Running`, or `Failed` when the process
/// cannot start.
pub(super) fn start(
    options: &FakeClusterOptions,
    state: &mut Store,
    namespace: &str,
    name: &str,
    pod: &mut Value,
) -> io::Result<()> {
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let first = &pod["spec"]["containers"][0];
    let ip = free_ip(state);
    let container = Container::new(options, name, &uid, &ip, first)?;
    let argv: Vec<String> = ["command", "args"]
        .iter()
        .filter_map(|key| first[key].as_array())
        .flatten()
        .filter_map(|arg| arg.as_str().map(str::to_owned))
        .collect();
    let log = options.root.join("pods").join(&uid).join("main.log");
    let (main, phase) = match container.start_main(&argv, &log) {
        Ok(main) => (main, "Running"),
        Err(error) => {
            pod["status"]["message"] = json!(format!("failed to start the container: {error}"));
            (None, "Failed")
        }
    };
    merge_status(pod, phase, &ip);
    state.pods.insert(
        (namespace.to_owned(), name.to_owned()),
        PodRuntime {
            container,
            log,
            main,
            ip,
        },
    );
    Ok(())
}

/// The address for a new pod: the lowest one no live pod holds, on the
/// cluster's loopback block (Linux answers on all of 127.0.0.0/8), so a
/// worker listening on its pod IP is reachable from the test like a pod is
/// from a server in the cluster, and a deleted pod's address is soon
/// another's, as in a cluster.
fn free_ip(state: &Store) -> String {
    (0..250 * 254)
        .map(|n| state.network.address(n))
        .find(|ip| state.pods.values().all(|pod| &pod.ip != ip))
        .unwrap_or_else(|| state.network.address(250 * 254 - 1))
}

/// Sets the phase of the pod `namespace/name`; `None` when there is no such
/// pod, else the directory to clear of processes when the phase is final.
pub(super) fn set_phase(
    state: &mut Store,
    namespace: &str,
    name: &str,
    phase: &str,
) -> Option<Option<PathBuf>> {
    let revision = state.next_revision();
    let pod = state
        .objects
        .get_mut(&collection(namespace))?
        .get_mut(name)?;
    let ip = pod["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    merge_status(pod, phase, &ip);
    pod["metadata"]["resourceVersion"] = json!(revision);
    if !matches!(phase, "Succeeded" | "Failed") {
        return Some(None);
    }
    Some(
        state
            .pods
            .get_mut(&(namespace.to_owned(), name.to_owned()))
            .map(PodRuntime::stop),
    )
}

/// Writes the status of a pod in `phase` into `pod`, keeping its message.
fn merge_status(pod: &mut Value, phase: &str, ip: &str) {
    let now = now();
    let running = phase == "Running";
    let started_at = pod["status"]["startTime"]
        .as_str()
        .map_or_else(|| now.clone(), str::to_owned);
    let state = match phase {
        "Running" => json!({"running": {"startedAt": started_at}}),
        "Succeeded" | "Failed" => json!({"terminated": {
            "exitCode": if phase == "Succeeded" { 0 } else { 1 },
            "reason": if phase == "Succeeded" { "Completed" } else { "Error" },
            "startedAt": started_at,
            "finishedAt": now,
        }}),
        _ => json!({"waiting": {"reason": "ContainerCreating"}}),
    };
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|container| {
            let name = container["name"].as_str().unwrap_or_default();
            json!({
                "name": name,
                "image": container["image"],
                "imageID": "",
                "containerID": format!("fake://{uid}/{name}"),
                "ready": running,
                "started": running,
                "restartCount": 0,
                "state": state,
            })
        })
        .collect();
    let ready = if running { "True" } else { "False" };
    let condition = |kind: &str, status: &str| json!({"type": kind, "status": status, "lastTransitionTime": now});
    let status = json!({
        "phase": phase,
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": started_at,
        "conditions": [
            condition("PodScheduled", "True"),
            condition("Initialized", "True"),
            condition("ContainersReady", ready),
            condition("Ready", ready),
        ],
        "containerStatuses": statuses,
    });
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    for (key, value) in status.as_object().into_iter().flatten() {
        pod["status"][key] = value.clone();
    }
}

/// `GET .../pods/{name}/log`: the main process's output so far.
pub(super) async fn log(
    State(shared): State<Arc<Shared>>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let log = {
        let state = shared.lock();
        if !state
            .objects
            .get(&collection(&namespace))
            .is_some_and(|pods| pods.contains_key(&name))
        {
            return not_found("pods", &name);
        }
        state
            .pods
            .get(&(namespace, name))
            .map(|runtime| runtime.log.clone())
    };
    let text = match log {
        Some(log) => tokio::fs::read(log).await.unwrap_or_default(),
        None => Vec::new(),
    };
    ([(header::CONTENT_TYPE, "text/plain")], text).into_response()
}
