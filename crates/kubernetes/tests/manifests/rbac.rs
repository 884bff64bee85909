//! What the server may do and what its pods may be: it may only manage
//! runner pods and their claims, and both namespaces enforce the
//! restricted pod security standard.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PodSpec, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

use crate::{
    describe, find, of_kind, pod_spec, rendered, server, ALL, RUNNER_NAMESPACE, SERVER_NAMESPACE,
};

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
