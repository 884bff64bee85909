//! The Kustomize manifests under `deploy/kubernetes`, rendered with `kubectl
//! kustomize` and read as the Kubernetes API types: every object must read
//! back exactly as written (the API types drop fields they do not know, so a
//! misspelt or misplaced field shows up as a difference), and the parts the
//! server and its runner pods rely on must be as the backend expects. The
//! Helm chart under `deploy/helm/toolserver`, linted and rendered by Helm's
//! own library, passes the same reading and renders the same objects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::any::TypeId;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
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
use serde_json::{json, Value};

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

#[test]
fn every_rendered_object_reads_back_as_its_kubernetes_type() {
    let mut problems = Vec::new();
    for overlay in ALL {
        let objects = rendered(overlay);
        let mut seen = BTreeSet::new();
        for object in &objects {
            let what = describe(object);
            let key = (
                object["apiVersion"].to_string(),
                object["kind"].to_string(),
                object["metadata"]["namespace"].to_string(),
                object["metadata"]["name"].to_string(),
            );
            if !seen.insert(key) {
                problems.push(format!("{overlay}: {what} is rendered twice"));
            }
            match validate(object) {
                Ok(namespaced) => {
                    let namespace = object["metadata"]["namespace"].as_str();
                    if namespaced && namespace.is_none_or(str::is_empty) {
                        problems.push(format!("{overlay}: {what} names no namespace"));
                    }
                    if !namespaced && namespace.is_some() {
                        problems.push(format!(
                            "{overlay}: {what} is cluster-scoped but names a namespace"
                        ));
                    }
                }
                Err(problem) => problems.push(format!("{overlay}: {what} {problem}")),
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// A Role's grants as (API group, resource) -> verbs.
fn grants(role: &Role) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut grants: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for rule in role.rules.iter().flatten() {
        assert!(
            rule.resource_names.is_none() && rule.non_resource_urls.is_none(),
            "{rule:?}"
        );
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                grants
                    .entry((group.clone(), resource.clone()))
                    .or_default()
                    .extend(rule.verbs.iter().cloned());
            }
        }
    }
    grants
}

#[test]
fn the_server_may_only_manage_runner_pods_and_their_claims() {
    let expected: BTreeMap<(String, String), BTreeSet<String>> = [
        (
            "",
            "pods",
            &["get", "list", "watch", "create", "delete", "patch"][..],
        ),
        ("", "pods/exec", &["create", "get"][..]),
        (
            "",
            "persistentvolumeclaims",
            &["get", "create", "delete"][..],
        ),
        ("networking.k8s.io", "networkpolicies", &["get"][..]),
    ]
    .into_iter()
    .map(|(group, resource, verbs)| {
        (
            (group.to_owned(), resource.to_owned()),
            verbs.iter().map(|v| (*v).to_owned()).collect(),
        )
    })
    .collect();
    for overlay in ALL {
        let objects = rendered(overlay);
        for kind in ["ClusterRole", "ClusterRoleBinding"] {
            assert!(of_kind(&objects, kind).is_empty(), "{overlay}: a {kind}");
        }
        let roles = of_kind(&objects, "Role");
        assert_eq!(roles.len(), 1, "{overlay}: one Role");
        let role: Role = find(&objects, "Role", RUNNER_NAMESPACE, "toolserver-runners");
        assert_eq!(grants(&role), expected, "{overlay}: the Role's rules");

        let bindings = of_kind(&objects, "RoleBinding");
        assert_eq!(bindings.len(), 1, "{overlay}: one RoleBinding");
        let binding: RoleBinding = find(
            &objects,
            "RoleBinding",
            RUNNER_NAMESPACE,
            "toolserver-runners",
        );
        assert_eq!(binding.role_ref.kind, "Role");
        assert_eq!(binding.role_ref.name, "toolserver-runners");
        let subjects = binding.subjects.unwrap_or_default();
        assert_eq!(subjects.len(), 1, "{overlay}: {subjects:?}");
        assert_eq!(subjects[0].kind, "ServiceAccount");
        assert_eq!(subjects[0].name, "toolserver");
        assert_eq!(subjects[0].namespace.as_deref(), Some(SERVER_NAMESPACE));

        let _: ServiceAccount = find(&objects, "ServiceAccount", SERVER_NAMESPACE, "toolserver");
        let spec = pod_spec(&server(&objects));
        assert_eq!(spec.service_account_name.as_deref(), Some("toolserver"));
    }
}

/// Whether a pod template meets the restricted Pod Security Standard; the
/// violations found.
fn restricted_violations(spec: &PodSpec) -> Vec<String> {
    let mut out = Vec::new();
    for (flag, name) in [
        (spec.host_network, "hostNetwork"),
        (spec.host_pid, "hostPID"),
        (spec.host_ipc, "hostIPC"),
    ] {
        if flag == Some(true) {
            out.push(format!("{name} is set"));
        }
    }
    for volume in spec.volumes.iter().flatten() {
        let allowed = volume.config_map.is_some()
            || volume.csi.is_some()
            || volume.downward_api.is_some()
            || volume.empty_dir.is_some()
            || volume.ephemeral.is_some()
            || volume.persistent_volume_claim.is_some()
            || volume.projected.is_some()
            || volume.secret.is_some();
        if !allowed {
            out.push(format!("volume {} is of a forbidden type", volume.name));
        }
    }
    let pod = spec.security_context.clone().unwrap_or_default();
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for container in containers {
        let name = &container.name;
        let own = container.security_context.clone().unwrap_or_default();
        if own.privileged == Some(true) {
            out.push(format!("{name}: privileged"));
        }
        if own.allow_privilege_escalation != Some(false) {
            out.push(format!("{name}: allowPrivilegeEscalation is not false"));
        }
        let capabilities = own.capabilities.clone().unwrap_or_default();
        if !capabilities.drop.iter().flatten().any(|c| c == "ALL") {
            out.push(format!("{name}: capabilities do not drop ALL"));
        }
        if capabilities
            .add
            .iter()
            .flatten()
            .any(|c| c != "NET_BIND_SERVICE")
        {
            out.push(format!("{name}: adds capabilities"));
        }
        if own.run_as_non_root.or(pod.run_as_non_root) != Some(true) {
            out.push(format!("{name}: runAsNonRoot is not true"));
        }
        if own.run_as_user.or(pod.run_as_user) == Some(0) {
            out.push(format!("{name}: runs as uid 0"));
        }
        let seccomp = own
            .seccomp_profile
            .clone()
            .or_else(|| pod.seccomp_profile.clone())
            .map(|profile| profile.type_);
        if !matches!(seccomp.as_deref(), Some("RuntimeDefault" | "Localhost")) {
            out.push(format!("{name}: no RuntimeDefault seccomp profile"));
        }
        if container
            .ports
            .iter()
            .flatten()
            .any(|port| port.host_port.is_some())
        {
            out.push(format!("{name}: uses a host port"));
        }
    }
    out
}

#[test]
fn both_namespaces_enforce_the_restricted_pod_security_standard() {
    for overlay in ALL {
        let objects = rendered(overlay);
        let mut restricted = BTreeSet::new();
        for namespace in [SERVER_NAMESPACE, RUNNER_NAMESPACE] {
            let object: Namespace = find(&objects, "Namespace", "", namespace);
            let labels = object.metadata.labels.unwrap_or_default();
            assert_eq!(
                labels
                    .get("pod-security.kubernetes.io/enforce")
                    .map(String::as_str),
                Some("restricted"),
                "{overlay}: namespace {namespace}: {labels:?}"
            );
            restricted.insert(namespace);
        }
        for object in of_kind(&objects, "Deployment") {
            let deployment: Deployment =
                serde_json::from_value(object.clone()).expect("a Deployment");
            let namespace = deployment.metadata.namespace.clone().unwrap_or_default();
            assert!(
                restricted.contains(namespace.as_str()),
                "{overlay}: {} runs outside the restricted namespaces",
                describe(object)
            );
            let violations = restricted_violations(&pod_spec(&deployment));
            assert!(
                violations.is_empty(),
                "{overlay}: {}: {violations:?}",
                describe(object)
            );
        }
    }
}

#[test]
fn the_server_runs_hardened_with_its_config_secret_and_probes() {
    for overlay in ALL {
        let objects = rendered(overlay);
        let deployment = server(&objects);
        let spec = pod_spec(&deployment);
        let container = server_container(&deployment);
        let own = container
            .security_context
            .clone()
            .expect("a securityContext");
        let pod = spec.security_context.clone().unwrap_or_default();
        assert_eq!(
            own.run_as_non_root.or(pod.run_as_non_root),
            Some(true),
            "{overlay}"
        );
        assert_eq!(own.read_only_root_filesystem, Some(true), "{overlay}");
        assert_eq!(own.allow_privilege_escalation, Some(false), "{overlay}");
        let capabilities = own.capabilities.expect("capabilities");
        assert_eq!(capabilities.drop, Some(vec!["ALL".to_owned()]), "{overlay}");
        assert!(capabilities.add.is_none(), "{overlay}");
        assert_eq!(own.run_as_user.or(pod.run_as_user), Some(10001));

        // Settings from the ConfigMap, secrets from toolserver-secrets.
        let sources = container.env_from.clone().unwrap_or_default();
        assert!(
            sources.iter().any(|source| source
                .config_map_ref
                .as_ref()
                .is_some_and(|r| r.name == "toolserver-config")),
            "{overlay}: {sources:?}"
        );
        assert!(
            sources.iter().any(|source| source
                .secret_ref
                .as_ref()
                .is_some_and(|r| r.name.starts_with("toolserver-secrets"))),
            "{overlay}: {sources:?}"
        );

        // Probes on the HTTP port, which the Service targets.
        let port = container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some("http"))
            .expect("a port named http");
        assert_eq!(port.container_port, 8080);
        let probe_path = |probe: Option<&k8s_openapi::api::core::v1::Probe>| {
            probe
                .and_then(|p| p.http_get.clone())
                .map(|get| (get.path, serde_json::to_value(get.port).expect("a port")))
        };
        assert_eq!(
            probe_path(container.readiness_probe.as_ref()),
            Some((Some("/readyz".to_owned()), json!("http")))
        );
        assert_eq!(
            probe_path(container.liveness_probe.as_ref()),
            Some((Some("/healthz".to_owned()), json!("http")))
        );
        let service: Service = find(&objects, "Service", SERVER_NAMESPACE, "toolserver");
        let service_spec = service.spec.expect("a Service spec");
        let pod_labels = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        for (key, value) in service_spec.selector.clone().unwrap_or_default() {
            assert_eq!(pod_labels.get(&key), Some(&value), "{overlay}: selector");
        }
        let service_port = &service_spec.ports.expect("ports")[0];
        assert_eq!(service_port.port, 8080);

        // The data directory is a writable emptyDir (the root is read-only).
        let config = config(&objects);
        let data_dir = config
            .get("TOOLSERVER_DATA_DIR")
            .expect("TOOLSERVER_DATA_DIR");
        let mount = container
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| &m.mount_path == data_dir)
            .expect("a volume at the data directory");
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .expect("the data volume");
        assert!(volume.empty_dir.is_some(), "{overlay}: {volume:?}");
        assert!(mount.read_only != Some(true));

        assert_eq!(config["TOOLSERVER_EXECUTOR"], "kubernetes", "{overlay}");
        assert_eq!(config["TOOLSERVER_K8S_NAMESPACE"], RUNNER_NAMESPACE);
        assert_eq!(
            config["TOOLSERVER_K8S_NETWORK_POLICY"],
            "toolserver-runners"
        );
        assert_eq!(config["TOOLSERVER_BIND"], "0.0.0.0:8080");
        assert_eq!(config["TOOLSERVER_LOG_FORMAT"], "json");
        for key in SECRET_KEYS {
            assert!(
                !config.contains_key(key),
                "{overlay}: {key} belongs in the Secret"
            );
        }
    }
}

/// Every upper-case word (`TOOLSERVER_BIND`, …) in the Rust sources under
/// `dir`: the settings the server and its Kubernetes backend declare.
fn setting_names(dir: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            setting_names(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            out.extend(
                text.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                    .filter(|word| word.len() > 1)
                    .map(str::to_owned),
            );
        }
    }
}

#[test]
fn config_keys_are_settings_the_server_reads() {
    let crates = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut known = BTreeSet::new();
    for krate in ["toolserver", "kubernetes"] {
        setting_names(&crates.join(krate).join("src"), &mut known);
    }
    for overlay in ALL {
        let objects = rendered(overlay);
        for key in config(&objects).keys() {
            assert!(
                known.contains(key),
                "{overlay}: toolserver-config sets {key}, which nothing reads"
            );
        }
    }
    for key in SECRET_KEYS {
        assert!(known.contains(key), "the Secret's {key} is read by nothing");
    }
}

/// `quantity` (a whole number with an optional unit) times `times`, in the
/// same unit, as the chart computes it.
fn times(quantity: &str, times: u64) -> String {
    let unit_at = quantity
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(quantity.len());
    let (number, unit) = quantity.split_at(unit_at);
    format!("{}{unit}", number.parse::<u64>().unwrap() * times)
}

/// The runner namespace's ResourceQuota and LimitRange against the
/// settings of `objects`: as many pods as the servers' caps on live
/// runners together, each with one runner's requests and limits, and no
/// container beyond one runner's limits.
fn runner_quota_problems(objects: &[Value]) -> Vec<String> {
    let config = config(objects);
    let setting = |name: &str| config.get(name).cloned().unwrap_or_default();
    let replicas = server(objects)
        .spec
        .and_then(|spec| spec.replicas)
        .unwrap_or(1) as u64;
    let pods = replicas
        * setting("TOOLSERVER_RUNNER_MAX_LIVE")
            .parse::<u64>()
            .unwrap();
    let quota: ResourceQuota = find(
        objects,
        "ResourceQuota",
        RUNNER_NAMESPACE,
        "toolserver-runners",
    );
    let hard = quota.spec.and_then(|spec| spec.hard).unwrap_or_default();
    let mut problems = Vec::new();
    let mut expect = |what: String, found: Option<String>, wanted: String| {
        if found.as_deref() != Some(wanted.as_str()) {
            problems.push(format!("{what} is {found:?}, not {wanted}"));
        }
    };
    let per_runner = [
        ("requests.cpu", "TOOLSERVER_K8S_CPU_REQUEST"),
        ("requests.memory", "TOOLSERVER_K8S_MEMORY_REQUEST"),
        ("limits.cpu", "TOOLSERVER_K8S_CPU_LIMIT"),
        ("limits.memory", "TOOLSERVER_K8S_MEMORY_LIMIT"),
    ];
    expect(
        "the quota's pods".into(),
        hard.get("pods").map(|q| q.0.clone()),
        pods.to_string(),
    );
    for (resource, name) in per_runner {
        expect(
            format!("the quota's {resource}"),
            hard.get(resource).map(|q| q.0.clone()),
            times(&setting(name), pods),
        );
    }
    let range: LimitRange = find(
        objects,
        "LimitRange",
        RUNNER_NAMESPACE,
        "toolserver-runners",
    );
    let item = range.spec.map(|spec| spec.limits).unwrap_or_default();
    let [item] = item.as_slice() else {
        return vec![format!("the LimitRange has {} items, not one", item.len())];
    };
    let of = |map: &Option<
        BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
              resource: &str| {
        map.as_ref()
            .and_then(|map| map.get(resource))
            .map(|q| q.0.clone())
    };
    for (part, map, cpu, memory) in [
        (
            "default",
            &item.default,
            "TOOLSERVER_K8S_CPU_LIMIT",
            "TOOLSERVER_K8S_MEMORY_LIMIT",
        ),
        (
            "max",
            &item.max,
            "TOOLSERVER_K8S_CPU_LIMIT",
            "TOOLSERVER_K8S_MEMORY_LIMIT",
        ),
        (
            "defaultRequest",
            &item.default_request,
            "TOOLSERVER_K8S_CPU_REQUEST",
            "TOOLSERVER_K8S_MEMORY_REQUEST",
        ),
    ] {
        expect(
            format!("the LimitRange's {part} cpu"),
            of(map, "cpu"),
            setting(cpu),
        );
        expect(
            format!("the LimitRange's {part} memory"),
            of(map, "memory"),
            setting(memory),
        );
    }
    problems
}

#[test]
fn the_runner_quota_follows_the_caps_on_live_runners_and_the_runner_resources() {
    let mut problems = Vec::new();
    for overlay in ALL {
        let objects = rendered(overlay);
        problems.extend(
            runner_quota_problems(&objects)
                .into_iter()
                .map(|problem| format!("{overlay}: {problem}")),
        );
    }
    let values = json!({
        "server": {"replicas": 3},
        "runners": {"maxLive": 10, "cpuLimit": "1500m", "memoryLimit": "1Gi"},
    });
    let (_, release) = helm_rendered(&values);
    problems.extend(
        runner_quota_problems(&release)
            .into_iter()
            .map(|problem| format!("chart with {values}: {problem}")),
    );
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The runner policy the backend builds (and checks for at start), so the
/// shipped manifest and the code cannot drift apart.
fn runner_policy_spec() -> Value {
    let policy = toolserver_kubernetes::manifests::runner_network_policy(RUNNER_NAMESPACE);
    serde_json::to_value(policy).unwrap()["spec"].clone()
}

/// The NetworkPolicies, by name; every one must be in the runner namespace.
fn policies(objects: &[Value]) -> BTreeMap<String, Value> {
    for policy in of_kind(objects, "NetworkPolicy") {
        assert_eq!(
            policy["metadata"]["namespace"],
            RUNNER_NAMESPACE,
            "{}",
            describe(policy)
        );
    }
    policies_in(objects, RUNNER_NAMESPACE)
}

#[test]
fn runner_pods_admit_only_the_server_and_get_dns_and_public_addresses_only() {
    let base = policies(&rendered(BASE));
    assert_eq!(
        base.keys().collect::<Vec<_>>(),
        ["toolserver-runners"],
        "the base's policies"
    );
    let spec = &base["toolserver-runners"];
    assert_eq!(spec, &runner_policy_spec());
    assert_eq!(
        spec["ingress"],
        json!([{
            "from": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": SERVER_NAMESPACE}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "toolserver"}},
            }],
            "ports": [{"protocol": "TCP", "port": 8790}],
        }]),
        "ingress from the server's pods to the worker channel only"
    );
    let typed: NetworkPolicy = find(
        &rendered(BASE),
        "NetworkPolicy",
        RUNNER_NAMESPACE,
        "toolserver-runners",
    );
    assert_eq!(
        typed.spec.expect("a spec").ingress.map(|rules| rules.len()),
        Some(1)
    );
    // The rule's selector picks the server pods, and only them.
    let objects = rendered(BASE);
    let servers: Vec<String> = of_kind(&objects, "Deployment")
        .iter()
        .filter(|d| {
            d["metadata"]["namespace"] == SERVER_NAMESPACE
                && d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
                    == "toolserver"
        })
        .map(|d| {
            d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(servers, ["toolserver"]);

    let production = policies(&rendered(PRODUCTION));
    assert_eq!(
        production, base,
        "the production example keeps the base policy"
    );
}

#[test]
fn the_kind_overlay_routes_runner_egress_through_the_shared_proxy() {
    let objects = rendered(KIND);
    let runner_policies: BTreeMap<String, Value> = policies_in(&objects, RUNNER_NAMESPACE);
    let proxied = toolserver_kubernetes::manifests::proxied_runner_network_policy(RUNNER_NAMESPACE);
    assert_eq!(
        runner_policies,
        BTreeMap::from([(
            "toolserver-runners".to_owned(),
            serde_json::to_value(proxied).unwrap()["spec"].clone()
        )]),
        "runners get DNS and the proxy only"
    );

    // The runner rule's selector picks the proxy pods, and only them; the
    // Service the runners are told about selects the same pods on the same port.
    let (name, value) = toolserver_kubernetes::manifests::EGRESS_PROXY_LABEL;
    let selected: Vec<String> = of_kind(&objects, "Deployment")
        .iter()
        .filter(|d| d["spec"]["template"]["metadata"]["labels"][name] == value)
        .map(|d| describe(d))
        .collect();
    assert_eq!(selected, ["Deployment toolserver/toolserver-egress"]);
    let service: Service = find(&objects, "Service", SERVER_NAMESPACE, "toolserver-egress");
    let service = service.spec.expect("a spec");
    assert_eq!(
        service.selector,
        Some(BTreeMap::from([(name.to_owned(), value.to_owned())]))
    );
    let port = toolserver_kubernetes::manifests::EGRESS_PROXY_PORT;
    assert_eq!(service.ports.unwrap()[0].port, i32::from(port));
    assert_eq!(
        config(&objects)
            .get("TOOLSERVER_K8S_EGRESS_PROXY")
            .map(String::as_str),
        Some(format!("toolserver-egress.{SERVER_NAMESPACE}.svc:{port}").as_str())
    );

    // The proxy reads the grant key and nothing else of the server's secrets,
    // and runs `toolserver egress-proxy` on the port the runners reach.
    let proxy: Deployment = find(
        &objects,
        "Deployment",
        SERVER_NAMESPACE,
        "toolserver-egress",
    );
    let container = pod_spec(&proxy).containers[0].clone();
    assert_eq!(container.args, Some(vec!["egress-proxy".to_owned()]));
    assert_eq!(container.env_from, None, "no whole Secret or ConfigMap");
    let from_secrets: Vec<String> = container
        .env
        .unwrap_or_default()
        .into_iter()
        .filter(|var| {
            var.value_from
                .as_ref()
                .is_some_and(|from| from.secret_key_ref.is_some())
        })
        .map(|var| var.name)
        .collect();
    assert_eq!(from_secrets, ["TOOLSERVER_EGRESS_TOKEN_KEY"]);
    let key = secret_data(&objects)
        .remove("TOOLSERVER_EGRESS_TOKEN_KEY")
        .expect("the kind Secret holds the grant key");
    assert!(key.len() >= 32, "the grant key needs 32 bytes");

    // The proxy admits runner pods only, and reaches DNS, the server's HTTP
    // port (callbacks) and public addresses only.
    let proxy_policies = policies_in(&objects, SERVER_NAMESPACE);
    let spec = &proxy_policies["toolserver-egress"];
    assert_eq!(
        spec["ingress"],
        json!([{
            "from": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": RUNNER_NAMESPACE}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "toolserver-runner"}},
            }],
            "ports": [{"protocol": "TCP", "port": port}],
        }])
    );
    let public = &runner_policy_spec()["egress"];
    let egress = spec["egress"].as_array().unwrap();
    assert_eq!(egress[0], public[0], "DNS");
    assert_eq!(
        egress[1],
        json!({
            "to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "toolserver"}}}],
            "ports": [{"protocol": "TCP", "port": 8080}],
        })
    );
    assert_eq!(
        &egress[2..],
        &public.as_array().unwrap()[1..],
        "public addresses"
    );
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

fn secret_data(objects: &[Value]) -> BTreeMap<String, String> {
    let secret: Secret = find(objects, "Secret", SERVER_NAMESPACE, "toolserver-secrets");
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| {
            (
                key,
                String::from_utf8(value.0).expect("a UTF-8 secret value"),
            )
        })
        .collect()
}

#[test]
fn the_kind_overlay_is_wired_for_the_end_to_end_suite() {
    let objects = rendered(KIND);
    let secrets = secret_data(&objects);
    assert_eq!(
        secrets.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        SECRET_KEYS.into_iter().collect::<BTreeSet<_>>()
    );
    let key = &secrets["TOOLSERVER_SECRETS_KEY"];
    assert!(
        key.len() == 64 && key.chars().all(|c| c.is_ascii_hexdigit()),
        "TOOLSERVER_SECRETS_KEY must be 64 hex digits: {key}"
    );
    let database = &secrets["DATABASE_URL"];
    assert!(
        database.starts_with("postgres://") && database.contains("@postgres.toolserver.svc:5432/"),
        "{database}"
    );
    let postgres: Service = find(&objects, "Service", SERVER_NAMESPACE, "postgres");
    assert_eq!(
        postgres.spec.expect("a spec").ports.expect("ports")[0].port,
        5432
    );
    let postgres: Deployment = find(&objects, "Deployment", SERVER_NAMESPACE, "postgres");
    let database_password = pod_spec(&postgres).containers[0]
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "POSTGRES_PASSWORD")
        .and_then(|e| e.value_from.clone())
        .and_then(|v| v.secret_key_ref)
        .expect("the password from a Secret");
    let password_secret = of_kind(&objects, "Secret")
        .into_iter()
        .find(|s| s["metadata"]["name"] == database_password.name.as_str())
        .expect("the database's password Secret");
    let password_secret: Secret =
        serde_json::from_value(password_secret.clone()).expect("a Secret");
    let password = password_secret.data.expect("data")[&database_password.key].clone();
    let password = String::from_utf8(password.0).expect("UTF-8");
    assert!(
        database.contains(&format!(":{password}@")),
        "DATABASE_URL uses the database's password"
    );

    let config = config(&objects);
    assert_eq!(
        config["TOOLSERVER_K8S_RUNNER_IMAGE"],
        "toolserver-runner:kind"
    );
    assert_eq!(config["TOOLSERVER_RUNNER_IDLE_SECS"], "20");
    assert_eq!(config["TOOLSERVER_OUTBOUND_ALLOW_PRIVATE"], "true");
    assert_eq!(
        config["TOOLSERVER_PUBLIC_URL"],
        "http://toolserver.toolserver.svc:8080"
    );
    let container = server_container(&server(&objects));
    assert_eq!(container.image.as_deref(), Some("toolserver:kind"));
    assert_eq!(container.image_pull_policy.as_deref(), Some("Never"));

    // scripts/kind-test.sh hands the suite the JWT secret from this file.
    let env_file = std::fs::read_to_string(manifests_dir().join(KIND).join("secrets.env"))
        .expect("the kind overlay's secrets.env");
    assert!(env_file
        .lines()
        .any(|line| line == format!("TOOLSERVER_JWT_SECRET={}", secrets["TOOLSERVER_JWT_SECRET"])));
}

#[test]
fn the_base_and_production_example_hold_no_secrets() {
    for overlay in [BASE, PRODUCTION] {
        let objects = rendered(overlay);
        assert!(
            of_kind(&objects, "Secret").is_empty(),
            "{overlay} must not carry secrets"
        );
    }
    let objects = rendered(PRODUCTION);
    let config = config(&objects);
    assert_eq!(config["TOOLSERVER_K8S_RUNTIME_CLASS"], "gvisor");
    assert_eq!(config["TOOLSERVER_BUNDLE_STORE"], "s3");
    assert!(!config.contains_key("TOOLSERVER_BUNDLE_DIR"));
    assert!(config.contains_key("TOOLSERVER_S3_BUCKET"));
    assert!(config["TOOLSERVER_PUBLIC_URL"].starts_with("https://"));
    assert!(of_kind(&objects, "PersistentVolumeClaim").is_empty());
    let deployment = server(&objects);
    assert!(pod_spec(&deployment)
        .volumes
        .iter()
        .flatten()
        .all(|v| v.persistent_volume_claim.is_none()));
    let image = server_container(&deployment).image.expect("an image");
    let runner = &config["TOOLSERVER_K8S_RUNNER_IMAGE"];
    for image in [image.as_str(), runner.as_str()] {
        let registry = image.split('/').next().unwrap_or_default();
        assert!(
            image.contains('/') && registry.contains('.'),
            "{image} names a registry"
        );
    }
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

/// The labels Helm puts on every object of a release (not on selectors or
/// pod templates).
const RELEASE_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

/// `objects` by kind, namespace and name, with the release labels taken
/// off (and empty label maps dropped), for comparing a release with the
/// Kustomize rendering.
fn comparable(objects: &[Value]) -> BTreeMap<String, Value> {
    objects
        .iter()
        .map(|object| {
            let mut object = object.clone();
            if let Some(labels) = object["metadata"]
                .get_mut("labels")
                .and_then(Value::as_object_mut)
            {
                for label in RELEASE_LABELS {
                    labels.remove(label);
                }
                if labels.is_empty() {
                    object["metadata"]
                        .as_object_mut()
                        .map(|metadata| metadata.remove("labels"));
                }
            }
            (describe(&object), object)
        })
        .collect()
}

/// The base with the egress-proxy component, rendered by kustomize from a
/// kustomization made for the test.
fn base_with_egress_proxy() -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    // Kustomize takes only relative paths: from the temporary directory up
    // to `/`, then down to the manifests.
    let up = "../".repeat(dir.path().components().count() - 1);
    let root = manifests_dir().canonicalize().unwrap();
    let root = format!("{up}{}", root.display().to_string().trim_start_matches('/'));
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {root}/{BASE}\ncomponents:\n  - {root}/components/egress-proxy\n",
        ),
    )
    .unwrap();
    let output = Command::new("kubectl")
        .args(["kustomize", "--load-restrictor", "LoadRestrictionsNone"])
        .arg(dir.path())
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kustomize of the base and the egress-proxy component failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_yaml::Deserializer::from_str(&String::from_utf8(output.stdout).unwrap())
        .map(|document| Value::deserialize(document).unwrap())
        .filter(|object| !object.is_null())
        .collect()
}

/// Where two renderings differ, object by object.
fn release_differences(release: &[Value], kustomized: &[Value]) -> Vec<String> {
    let (release, kustomized) = (comparable(release), comparable(kustomized));
    let mut problems = Vec::new();
    for what in kustomized
        .keys()
        .filter(|what| !release.contains_key(*what))
    {
        problems.push(format!("{what}: in the Kustomize rendering only"));
    }
    for (what, object) in &release {
        match kustomized.get(what) {
            None => problems.push(format!("{what}: in the release only")),
            Some(expected) => {
                let mut differences = Vec::new();
                differ("", object, expected, &mut differences);
                problems.extend(differences.into_iter().map(|d| format!("{what}: {d}")));
            }
        }
    }
    problems
}

#[test]
fn the_helm_chart_lints_clean_and_renders_only_kubernetes_types() {
    let values = [
        json!({}),
        json!({"egressProxy": {"enabled": true}, "worker": {"replicas": 2}}),
        json!({"namespaces": {"create": false}, "bundles": {"store": "s3"},
               "server": {"extraConfig": {"TOOLSERVER_S3_BUCKET": "tools"}}}),
    ];
    let mut problems = Vec::new();
    for values in values {
        let (lint, objects) = helm_rendered(&values);
        let findings: Vec<&Value> = lint["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|message| message["severity"].as_u64().unwrap_or(3) >= 2)
            .collect();
        assert!(
            findings.is_empty() && lint["errors"].as_array().unwrap().is_empty(),
            "helm lint --strict with {values}: {lint}"
        );
        for object in &objects {
            match validate(object) {
                Ok(true) if object["metadata"]["namespace"].as_str().is_none() => {
                    problems.push(format!("{values}: {} names no namespace", describe(object)))
                }
                Ok(_) => {}
                Err(problem) => problems.push(format!("{values}: {} {problem}", describe(object))),
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn the_helm_chart_by_default_is_the_kustomize_base() {
    let (_, release) = helm_rendered(&json!({}));
    let problems = release_differences(&release, &rendered(BASE));
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn with_the_egress_proxy_the_helm_chart_is_the_base_with_its_component() {
    let (_, release) = helm_rendered(&json!({"egressProxy": {"enabled": true}}));
    let problems = release_differences(&release, &base_with_egress_proxy());
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn the_chart_runs_workers_on_the_servers_config_and_secret() {
    let (_, release) = helm_rendered(&json!({"worker": {"replicas": 3}}));
    let worker: Deployment = find(
        &release,
        "Deployment",
        SERVER_NAMESPACE,
        "toolserver-worker",
    );
    let spec = worker.spec.expect("a spec");
    assert_eq!(spec.replicas, Some(3));
    let container = &spec.template.spec.expect("a pod spec").containers[0];
    assert_eq!(container.args.as_deref(), Some(&["worker".to_owned()][..]));
    let sources: Vec<String> = container
        .env_from
        .iter()
        .flatten()
        .map(|source| {
            source
                .config_map_ref
                .as_ref()
                .map(|c| c.name.clone())
                .or_else(|| source.secret_ref.as_ref().map(|s| s.name.clone()))
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(sources, ["toolserver-config", "toolserver-secrets"]);
    let server = server(&release);
    assert_eq!(
        server_container(&server).security_context,
        container.security_context,
        "workers run as hardened as the server"
    );
    let (_, without) = helm_rendered(&json!({}));
    assert!(
        of_kind(&without, "Deployment")
            .iter()
            .all(|d| d["metadata"]["name"] != "toolserver-worker"),
        "no worker unless asked for"
    );
}
