//! The kind overlay: runner egress routed through the shared proxy, and
//! the wiring the end-to-end suite relies on.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
use serde_json::{json, Value};

use crate::{
    config, describe, find, manifests_dir, of_kind, pod_spec, policies_in, rendered,
    runner_policy_spec, server, server_container, KIND, RUNNER_NAMESPACE, SECRET_KEYS,
    SERVER_NAMESPACE,
};

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
