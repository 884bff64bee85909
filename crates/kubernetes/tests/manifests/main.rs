//! The Kustomize manifests under `deploy/kubernetes`, rendered with `kubectl
//! kustomize` and read as the Kubernetes API types: every object must read
//! back exactly as written (the API types drop fields they do not know, so a
//! misspelt or misplaced field shows up as a difference), and the parts the
//! server and its runner pods rely on must be as the backend expects. The
//! Helm chart under `deploy/helm/toolserver`, linted and rendered by Helm's
//! own library, passes the same reading and renders the same objects. What
//! the modules share is here: rendering, reading as API types, and finding
//! objects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::any::TypeId;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, LimitRange, Namespace, PersistentVolumeClaim, PodSpec, ResourceQuota,
    Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::{NamespaceResourceScope, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod helm;
mod kind;
mod rbac;
mod runners;
mod server_deployment;
mod types;

const BASE: &str = "base";
const KIND: &str = "overlays/kind";
const PRODUCTION: &str = "overlays/production-example";
const ALL: [&str; 3] = [BASE, KIND, PRODUCTION];

const SERVER_NAMESPACE: &str = "toolserver";
const RUNNER_NAMESPACE: &str = "toolserver-runners";

/// The keys the Secret `toolserver-secrets` must hold.
const SECRET_KEYS: [&str; 5] = [
    "DATABASE_URL",
    "TOOLSERVER_JWT_SECRET",
    "TOOLSERVER_SECRETS_KEY",
    "TOOLSERVER_BUNDLE_URL_SECRET",
    "TOOLSERVER_EGRESS_TOKEN_KEY",
];

fn manifests_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/kubernetes"
    ))
}

/// The objects `kubectl kustomize deploy/kubernetes/<overlay>` renders, as
/// JSON, in output order (Secret data unwrapped, see [`normalized`]).
/// `overlay` is `base` or `overlays/<name>`.
///
/// # Panics
/// When kubectl is missing or the kustomization does not build.
fn rendered(overlay: &str) -> Vec<Value> {
    let dir = manifests_dir().join(overlay);
    let output = match Command::new("kubectl").arg("kustomize").arg(&dir).output() {
        Ok(output) => output,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => panic!(
            "kubectl is not on PATH: these tests render deploy/kubernetes with \
             `kubectl kustomize`; run `make test-deps`, which says how to install it"
        ),
        Err(err) => panic!("running kubectl kustomize {}: {err}", dir.display()),
    };
    assert!(
        output.status.success(),
        "kubectl kustomize {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("kubectl prints UTF-8");
    let objects: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).expect("kubectl prints valid YAML"))
        .filter(|object| !object.is_null())
        .map(normalized)
        .collect();
    assert!(!objects.is_empty(), "{overlay} renders nothing");
    objects
}

/// `object` as the API server reads it: kustomize wraps long base64 Secret
/// values over several lines, and base64 decoding skips line breaks.
fn normalized(mut object: Value) -> Value {
    if object["kind"] == "Secret" {
        if let Some(data) = object.get_mut("data").and_then(Value::as_object_mut) {
            for value in data.values_mut() {
                if let Some(text) = value.as_str() {
                    *value = Value::String(text.replace(['\n', '\r'], ""));
                }
            }
        }
    }
    object
}

/// Reads `object` as `T` and back; answers whether `T` is namespaced.
fn round_trip<T>(object: &Value) -> Result<bool, String>
where
    T: Resource + DeserializeOwned + Serialize,
    T::Scope: 'static,
{
    let typed: T = serde_json::from_value(object.clone())
        .map_err(|err| format!("does not read as {} {}: {err}", T::API_VERSION, T::KIND))?;
    let back = serde_json::to_value(&typed).map_err(|err| err.to_string())?;
    if back != *object {
        let mut differences = Vec::new();
        differ("", object, &back, &mut differences);
        return Err(format!(
            "is not read back as written (unknown or misspelt fields, or values of the wrong type):\n  {}",
            differences.join("\n  ")
        ));
    }
    Ok(TypeId::of::<T::Scope>() == TypeId::of::<NamespaceResourceScope>())
}

/// Where `written` and `read` differ, as JSON pointers.
fn differ(path: &str, written: &Value, read: &Value, out: &mut Vec<String>) {
    match (written, read) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let at = format!("{path}/{key}");
                match b.get(key) {
                    Some(other) => differ(&at, value, other, out),
                    None => out.push(format!("{at}: not a field of the API type")),
                }
            }
            for key in b.keys().filter(|key| !a.contains_key(*key)) {
                out.push(format!("{path}/{key}: added when read"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                differ(&format!("{path}/{index}"), x, y, out);
            }
        }
        _ if written != read => out.push(format!("{path}: written {written}, read {read}")),
        _ => {}
    }
}

/// Checks one object against its API type; answers whether it is namespaced.
fn validate(object: &Value) -> Result<bool, String> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    macro_rules! by_type {
        ($($ty:ty),+ $(,)?) => {
            $(
                if api_version == <$ty as Resource>::API_VERSION && kind == <$ty as Resource>::KIND {
                    return round_trip::<$ty>(object);
                }
            )+
        };
    }
    by_type!(
        Namespace,
        ServiceAccount,
        ConfigMap,
        Secret,
        Service,
        PersistentVolumeClaim,
        LimitRange,
        ResourceQuota,
        Role,
        RoleBinding,
        ClusterRole,
        ClusterRoleBinding,
        NetworkPolicy,
        Deployment,
        StatefulSet,
        DaemonSet,
        PodDisruptionBudget,
        RuntimeClass,
    );
    Err(format!(
        "{api_version} {kind} is not a type these tests know; add it to validate()"
    ))
}

fn describe(object: &Value) -> String {
    format!(
        "{} {}/{}",
        object["kind"].as_str().unwrap_or("?"),
        object["metadata"]["namespace"].as_str().unwrap_or("-"),
        object["metadata"]["name"].as_str().unwrap_or("?")
    )
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The one object of `kind` named `name` (kustomize may add a hash suffix
/// to generated names, so a `name-<hash>` matches too).
fn find<T: DeserializeOwned>(objects: &[Value], kind: &str, namespace: &str, name: &str) -> T {
    let found: Vec<&Value> = of_kind(objects, kind)
        .into_iter()
        .filter(|o| o["metadata"]["namespace"].as_str().unwrap_or_default() == namespace)
        .filter(|o| {
            let actual = o["metadata"]["name"].as_str().unwrap_or_default();
            actual == name
                || actual
                    .strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|hash| hash.len() == 10)
        })
        .collect();
    assert_eq!(found.len(), 1, "one {kind} {namespace}/{name}: {found:?}");
    serde_json::from_value(found[0].clone()).expect("a valid object")
}

fn config(objects: &[Value]) -> BTreeMap<String, String> {
    find::<ConfigMap>(objects, "ConfigMap", SERVER_NAMESPACE, "toolserver-config")
        .data
        .expect("the server's config has data")
}

fn server(objects: &[Value]) -> Deployment {
    find(objects, "Deployment", SERVER_NAMESPACE, "toolserver")
}

fn pod_spec(deployment: &Deployment) -> PodSpec {
    deployment
        .spec
        .as_ref()
        .and_then(|spec| spec.template.spec.clone())
        .expect("a pod template")
}

fn server_container(deployment: &Deployment) -> Container {
    pod_spec(deployment)
        .containers
        .into_iter()
        .find(|c| c.name == "toolserver")
        .expect("a container named toolserver")
}

/// The runner policy the backend builds (and checks for at start), so the
/// shipped manifest and the code cannot drift apart.
fn runner_policy_spec() -> Value {
    let policy = toolserver_kubernetes::manifests::runner_network_policy(RUNNER_NAMESPACE);
    serde_json::to_value(policy).unwrap()["spec"].clone()
}

/// The NetworkPolicies of `namespace`, by name.
fn policies_in(objects: &[Value], namespace: &str) -> BTreeMap<String, Value> {
    of_kind(objects, "NetworkPolicy")
        .into_iter()
        .filter(|policy| policy["metadata"]["namespace"] == namespace)
        .map(|policy| {
            (
                policy["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                policy["spec"].clone(),
            )
        })
        .collect()
}

/// The Helm chart under `deploy/helm/toolserver`.
fn chart_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/helm/toolserver"
    ))
}

/// What Helm's lint (strict) says of the chart with `values`, and the
/// objects it renders into the namespace `toolserver` (NOTES.txt aside),
/// through Helm's own library (`scripts/helm-chart.py`).
fn helm_rendered(values: &Value) -> (Value, Vec<Value>) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/helm-chart.py");
    let output = Command::new("python3")
        .arg(script)
        .arg(chart_dir())
        .arg(SERVER_NAMESPACE)
        .arg(values.to_string())
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "rendering the chart failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_slice(&output.stdout).expect("the script prints JSON");
    let mut templates: Vec<(&String, &Value)> = answer["manifests"]
        .as_object()
        .expect("rendered templates")
        .iter()
        .filter(|(name, _)| name.ends_with(".yaml"))
        .collect();
    templates.sort_by_key(|(name, _)| *name);
    let objects = templates
        .into_iter()
        .flat_map(|(_, text)| {
            serde_yaml::Deserializer::from_str(text.as_str().expect("YAML text"))
                .map(|document| Value::deserialize(document).expect("the chart renders YAML"))
                .collect::<Vec<_>>()
        })
        .filter(|object| !object.is_null())
        .collect();
    (answer["lint"].clone(), objects)
}
