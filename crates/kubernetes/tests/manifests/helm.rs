//! The Helm chart: it lints clean and renders only Kubernetes types, by
//! default renders the Kustomize base (and with the egress proxy, the base
//! with its component), and runs its workers on the server's config and
//! secret.

use std::collections::BTreeMap;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{
    describe, differ, find, helm_rendered, manifests_dir, of_kind, rendered, server,
    server_container, validate, BASE, SERVER_NAMESPACE,
};

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
