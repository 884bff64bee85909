//! The server's Deployment and config: it runs hardened with its config,
//! secret and probes, its config keys are settings it reads, and the base
//! and production example hold no secrets.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Service;
use serde_json::json;

use crate::{
    config, find, of_kind, pod_spec, rendered, server, server_container, ALL, BASE, PRODUCTION,
    RUNNER_NAMESPACE, SECRET_KEYS, SERVER_NAMESPACE,
};

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
