//! The objects the backend creates, built purely from settings and a
//! reservation key: the runner pod, its cache claim, a warm pod of the pool
//! (`warm.rs`) and the patch that binds it to a key, and the runner
//! NetworkPolicy that `deploy/kubernetes/base` ships (a test compares the two).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, ResourceRequirements,
    SeccompProfile, SecurityContext, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::{Digest, Sha256};
use toolserver_sandbox::ReservationKey;

use crate::names::{CHANNEL_HOST_ENV, CHANNEL_PORT_ENV, CHANNEL_SECRET_ENV};
pub use crate::names::{CONTAINER, NETWORK_POLICY_NAME};
use crate::settings::{CacheVolume, KubernetesSettings, RunnerChannel};

/// Label every runner pod carries; the NetworkPolicy selects on it.
pub const RUNNER_LABEL: (&str, &str) = ("app.kubernetes.io/name", "toolserver-runner");
/// Label marking objects this backend manages.
pub const MANAGED_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "toolserver");
/// Label with the account (verbatim when label-safe, else a hash).
pub const ACCOUNT_LABEL: &str = "toolserver.dev/account";
/// Label with the tool id.
pub const TOOL_LABEL: &str = "toolserver.dev/tool";
/// Annotation with the exact account id (labels cannot hold every id).
pub const ACCOUNT_ANNOTATION: &str = "toolserver.dev/account";
/// Annotation with the exact tool id.
pub const TOOL_ANNOTATION: &str = "toolserver.dev/tool";
/// Annotation with the time of the runner's last call (RFC 3339).
pub const LAST_USED_ANNOTATION: &str = "toolserver.dev/last-used";
/// Label of a warm pod waiting in the pool, bound to no key (`"true"`);
/// its claim removes it.
pub const WARM_LABEL: &str = "toolserver.dev/warm";
/// Label naming the server process whose pool made a warm pod.
pub const REPLICA_LABEL: &str = "toolserver.dev/replica";
/// Label naming the runner (the key's hash, [`pod_name`]) a claimed warm
/// pod serves, since its own name is not the key's.
pub const RUNNER_NAME_LABEL: &str = "toolserver.dev/runner";
/// Annotation with the last time a warm pod's server vouched for it
/// (RFC 3339); a warm pod whose server stopped doing so is deleted.
pub const HEARTBEAT_ANNOTATION: &str = "toolserver.dev/warm-heartbeat";
/// Annotation with the time a warm pod was claimed (RFC 3339): of two pods
/// claimed for one key, the earlier claim is the runner.
pub const CLAIMED_AT_ANNOTATION: &str = "toolserver.dev/claimed-at";
/// How warm pods' names start (`tr-warm-` and random hex).
pub const WARM_NAME_PREFIX: &str = "tr-warm-";
/// Namespace of the server's pods (the only ones a runner admits), as
/// `deploy/kubernetes/base` installs it.
pub const SERVER_NAMESPACE: &str = "toolserver";
/// Label of the server's pods.
pub const SERVER_LABEL: (&str, &str) = ("app.kubernetes.io/name", "toolserver");
/// Name of the worker's port on the pod network.
pub const CHANNEL_PORT_NAME: &str = "worker";
/// The runner variable naming the shared egress proxy (`host:port`).
pub const EGRESS_PROXY_ENV: &str = "TOOLSERVER_EGRESS_PROXY";
/// Label of the egress proxy's pods (in [`SERVER_NAMESPACE`]).
pub const EGRESS_PROXY_LABEL: (&str, &str) = ("app.kubernetes.io/name", "toolserver-egress");
/// The egress proxy's port, as `deploy/kubernetes/components/egress-proxy`
/// serves it.
pub const EGRESS_PROXY_PORT: u16 = 3128;

/// IPv4 ranges runner pods may not reach: private, shared, loopback,
/// link-local (node metadata) and "this network". A cluster whose pod or
/// service ranges lie elsewhere adds them in its overlay.
pub const BLOCKED_IPV4: [&str; 7] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
];
/// IPv6 ranges runner pods may not reach: loopback, unique-local, link-local.
pub const BLOCKED_IPV6: [&str; 3] = ["::1/128", "fc00::/7", "fe80::/10"];

/// The name of the runner pod for `key`.
pub fn pod_name(key: &ReservationKey) -> String {
    key.runner_name()
}

/// The name of the cache claim for `key`.
pub fn claim_name(key: &ReservationKey) -> String {
    format!("{}-cache", key.runner_name())
}

/// A label value for `value`: itself when it is a valid label value, else
/// `sha256-` and 40 hex characters of its hash.
fn label_value(value: &str) -> String {
    let valid = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && value.as_bytes()[0].is_ascii_alphanumeric()
        && value.as_bytes()[value.len() - 1].is_ascii_alphanumeric();
    if valid {
        return value.to_owned();
    }
    let digest = hex::encode(Sha256::digest(value.as_bytes()));
    format!("sha256-{}", &digest[..40])
}

/// The labels of every object belonging to `key`'s runner.
pub fn runner_labels(key: &ReservationKey) -> BTreeMap<String, String> {
    BTreeMap::from([
        (RUNNER_LABEL.0.into(), RUNNER_LABEL.1.into()),
        (MANAGED_LABEL.0.into(), MANAGED_LABEL.1.into()),
        (ACCOUNT_LABEL.into(), label_value(key.account().as_str())),
        (TOOL_LABEL.into(), label_value(&key.tool().to_string())),
    ])
}

/// The annotations that tie an object to exactly one key.
pub fn runner_annotations(key: &ReservationKey) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ACCOUNT_ANNOTATION.into(), key.account().as_str().to_owned()),
        (TOOL_ANNOTATION.into(), key.tool().to_string()),
    ])
}

/// Whether `meta` belongs to `key` (pod names are hashes; this rules out a
/// collision or a foreign object of the same name).
pub fn belongs_to(meta: &ObjectMeta, key: &ReservationKey) -> bool {
    let expected = runner_annotations(key);
    meta.annotations.as_ref().is_some_and(|annotations| {
        expected
            .iter()
            .all(|(name, value)| annotations.get(name) == Some(value))
    })
}

fn quantity(value: &str) -> Quantity {
    Quantity(value.to_owned())
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

fn env_from_field(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.into(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..VolumeMount::default()
    }
}

fn empty_dir(name: &str, size: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(quantity(size)),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The runner pod for `key`: the worker image, idle until the server execs
/// the worker into it; non-root, read-only root filesystem, no capabilities,
/// no privilege escalation, RuntimeDefault seccomp, no service-account
/// token, bounded CPU and memory, writable `/tmp` and `/cache` only. With a
/// direct channel, the worker will listen on its pod IP at the channel port
/// and want `secret` (this pod's alone) on every request.
pub fn runner_pod(
    settings: &KubernetesSettings,
    key: &ReservationKey,
    now: &str,
    secret: &str,
) -> Pod {
    let mut annotations = runner_annotations(key);
    annotations.insert(LAST_USED_ANNOTATION.into(), now.to_owned());
    let cache = match &settings.cache {
        CacheVolume::Persistent { .. } => Volume {
            name: "cache".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(key),
                read_only: None,
            }),
            ..Volume::default()
        },
        CacheVolume::Ephemeral { size } => empty_dir("cache", size),
    };
    let metadata = ObjectMeta {
        name: Some(pod_name(key)),
        namespace: Some(settings.namespace.clone()),
        labels: Some(runner_labels(key)),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    };
    hardened_pod(settings, metadata, cache, secret)
}

/// The warm pod `name` of server `replica`'s pool: hardened and wired as a
/// runner pod (the NetworkPolicy selects it from the start), with a secret
/// of its own, but of no key: no account or tool labels, and its module
/// cache an `emptyDir` of the cache's size, since a pod's volumes cannot
/// change once it exists and a key's claim is unknown until it is claimed.
pub fn warm_pod(
    settings: &KubernetesSettings,
    name: &str,
    replica: &str,
    now: &str,
    secret: &str,
) -> Pod {
    let size = match &settings.cache {
        CacheVolume::Persistent { size, .. } | CacheVolume::Ephemeral { size } => size,
    };
    let metadata = ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(settings.namespace.clone()),
        labels: Some(BTreeMap::from([
            (RUNNER_LABEL.0.into(), RUNNER_LABEL.1.into()),
            (MANAGED_LABEL.0.into(), MANAGED_LABEL.1.into()),
            (WARM_LABEL.into(), "true".into()),
            (REPLICA_LABEL.into(), replica.to_owned()),
        ])),
        annotations: Some(BTreeMap::from([(
            HEARTBEAT_ANNOTATION.into(),
            now.to_owned(),
        )])),
        ..ObjectMeta::default()
    };
    hardened_pod(settings, metadata, empty_dir("cache", size), secret)
}

/// The merge patch that binds a warm pod to `key` for good: the key's
/// labels and annotations (what the NetworkPolicy, the reaper and
/// [`belongs_to`] look at), [`RUNNER_NAME_LABEL`], the claim's time, the
/// pool's marks removed; applied only to the pod's `resource_version`, so
/// of two claims of one pod exactly one succeeds.
pub fn claim_patch(key: &ReservationKey, resource_version: &str, now: &str) -> serde_json::Value {
    let mut labels = serde_json::Map::new();
    for (name, value) in runner_labels(key) {
        labels.insert(name, value.into());
    }
    labels.insert(RUNNER_NAME_LABEL.into(), pod_name(key).into());
    labels.insert(WARM_LABEL.into(), serde_json::Value::Null);
    labels.insert(REPLICA_LABEL.into(), serde_json::Value::Null);
    let mut annotations = serde_json::Map::new();
    for (name, value) in runner_annotations(key) {
        annotations.insert(name, value.into());
    }
    annotations.insert(LAST_USED_ANNOTATION.into(), now.into());
    annotations.insert(CLAIMED_AT_ANNOTATION.into(), now.into());
    annotations.insert(HEARTBEAT_ANNOTATION.into(), serde_json::Value::Null);
    serde_json::json!({
        "metadata": {
            "resourceVersion": resource_version,
            "labels": labels,
            "annotations": annotations,
        }
    })
}

/// A runner pod (of a key or warm) with `metadata` and `cache` as its
/// module cache: the hardening and wiring every runner pod shares.
fn hardened_pod(
    settings: &KubernetesSettings,
    metadata: ObjectMeta,
    cache: Volume,
    secret: &str,
) -> Pod {
    let limits = &settings.resources;
    let container = Container {
        name: CONTAINER.into(),
        image: Some(settings.image.clone()),
        image_pull_policy: Some(settings.image_pull_policy.clone()),
        command: Some(vec![
            "/usr/bin/tini".into(),
            "--".into(),
            "node".into(),
            settings.script("hold.mjs"),
        ]),
        env: Some(container_env(settings, secret)),
        ports: settings.channel.port().map(|port| {
            vec![ContainerPort {
                name: Some(CHANNEL_PORT_NAME.into()),
                container_port: i32::from(port),
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            }]
        }),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), quantity(&limits.cpu_request)),
                ("memory".into(), quantity(&limits.memory_request)),
            ])),
            limits: Some(BTreeMap::from([
                ("cpu".into(), quantity(&limits.cpu_limit)),
                ("memory".into(), quantity(&limits.memory_limit)),
            ])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(settings.run_as_user),
            run_as_group: Some(settings.run_as_user),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![mount("tmp", "/tmp"), mount("cache", "/cache")]),
        ..Container::default()
    };
    Pod {
        metadata,
        spec: Some(PodSpec {
            containers: vec![container],
            restart_policy: Some("Always".into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            runtime_class_name: settings.runtime_class.clone(),
            termination_grace_period_seconds: Some(5),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(settings.run_as_user),
                run_as_group: Some(settings.run_as_user),
                fs_group: Some(settings.run_as_user),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..PodSecurityContext::default()
            }),
            volumes: Some(vec![empty_dir("tmp", &settings.tmp_size), cache]),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// The runner container's environment: paths, the direct channel's
/// address, port and secret when there is one, and the shared egress proxy
/// when there is one.
fn container_env(settings: &KubernetesSettings, secret: &str) -> Vec<EnvVar> {
    let mut vars = vec![
        env("HOME", "/tmp"),
        env("TMPDIR", "/tmp"),
        env("NODE_ENV", "production"),
        env("TOOLSERVER_CACHE_ROOTS", "/cache/tools"),
    ];
    if let Some(port) = settings.channel.port() {
        vars.push(env_from_field(CHANNEL_HOST_ENV, "status.podIP"));
        vars.push(env(CHANNEL_PORT_ENV, &port.to_string()));
        vars.push(env(CHANNEL_SECRET_ENV, secret));
    }
    if let Some(egress) = &settings.egress {
        vars.push(env(EGRESS_PROXY_ENV, &egress.proxy));
    }
    vars
}

/// The cache claim for `key`, when the cache is persistent.
pub fn cache_claim(
    settings: &KubernetesSettings,
    key: &ReservationKey,
) -> Option<PersistentVolumeClaim> {
    let CacheVolume::Persistent {
        size,
        storage_class,
    } = &settings.cache
    else {
        return None;
    };
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(key)),
            namespace: Some(settings.namespace.clone()),
            labels: Some(runner_labels(key)),
            annotations: Some(runner_annotations(key)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: storage_class.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), quantity(size))])),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    })
}

fn ip_block(cidr: &str, except: &[&str]) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.into(),
            except: Some(except.iter().map(|range| (*range).to_owned()).collect()),
        }),
        ..NetworkPolicyPeer::default()
    }
}

/// The pods labelled `label` in `namespace`.
fn pods_in(namespace: &str, label: (&str, &str)) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(match_labels(&[("kubernetes.io/metadata.name", namespace)])),
        pod_selector: Some(match_labels(&[label])),
        ip_block: None,
    }
}

/// Port `number` over `protocol` (`TCP` or `UDP`).
fn policy_port(protocol: &str, number: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(protocol.into()),
        port: Some(IntOrString::Int(i32::from(number))),
        end_port: None,
    }
}

fn match_labels(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            pairs
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
        ),
        match_expressions: None,
    }
}

/// The runner namespace's NetworkPolicy: ingress only from the server's
/// pods, to the worker's channel port (the default one); egress to cluster
/// DNS and to public addresses only (every range in [`BLOCKED_IPV4`] and
/// [`BLOCKED_IPV6`] is excepted).
pub fn runner_network_policy(namespace: &str) -> NetworkPolicy {
    let public = |peer| NetworkPolicyEgressRule {
        to: Some(vec![peer]),
        ports: None,
    };
    runner_policy(
        namespace,
        vec![
            public(ip_block("0.0.0.0/0", &BLOCKED_IPV4)),
            public(ip_block("::/0", &BLOCKED_IPV6)),
        ],
    )
}

/// The runner namespace's NetworkPolicy when runners share an egress proxy
/// (`deploy/kubernetes/components/egress-proxy`): ingress as
/// [`runner_network_policy`], egress to cluster DNS and to the proxy's pods
/// on [`EGRESS_PROXY_PORT`] only.
pub fn proxied_runner_network_policy(namespace: &str) -> NetworkPolicy {
    let proxy = NetworkPolicyEgressRule {
        to: Some(vec![pods_in(SERVER_NAMESPACE, EGRESS_PROXY_LABEL)]),
        ports: Some(vec![policy_port("TCP", EGRESS_PROXY_PORT)]),
    };
    runner_policy(namespace, vec![proxy])
}

/// A runner NetworkPolicy: ingress only from the server's pods on the
/// worker's channel port, egress to cluster DNS and `egress`.
fn runner_policy(namespace: &str, egress: Vec<NetworkPolicyEgressRule>) -> NetworkPolicy {
    let port = RunnerChannel::DEFAULT_DIRECT.port().unwrap_or_default();
    let from_server = NetworkPolicyIngressRule {
        from: Some(vec![pods_in(SERVER_NAMESPACE, SERVER_LABEL)]),
        ports: Some(vec![policy_port("TCP", port)]),
    };
    let dns = NetworkPolicyEgressRule {
        to: Some(vec![pods_in("kube-system", ("k8s-app", "kube-dns"))]),
        ports: Some(vec![policy_port("UDP", 53), policy_port("TCP", 53)]),
    };
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(NETWORK_POLICY_NAME.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(&[RUNNER_LABEL])),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![from_server]),
            egress: Some([vec![dns], egress].concat()),
        }),
    }
}
