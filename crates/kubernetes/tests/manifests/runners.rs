//! The runner namespace: its quota follows the caps on live runners and
//! the runner resources, and its network policies admit only the server
//! and let runners reach DNS and public addresses only.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::{json, Value};

use crate::{
    config, describe, find, helm_rendered, of_kind, policies_in, rendered, runner_policy_spec,
    server, ALL, BASE, PRODUCTION, RUNNER_NAMESPACE, SERVER_NAMESPACE,
};

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
