//! `GET /metrics` on its own listener: after a streamed turn with a tool
//! call, an invoke and a detached turn completed through the callback, the
//! scrape parses as Prometheus text, the series are there, their counts
//! moved, and no label carries an id.

use std::collections::HashMap;

use openmetrics_parser::prometheus::parse_prometheus;
use openmetrics_parser::{MetricsExposition, PrometheusType, PrometheusValue};
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::http::free_port;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::server::{script, Server, Setup};

const ECHO: &str = "export default { execute(ctx, input) { return { echo: input }; } };";

/// One sample of a scrape: its family, labels and value (a histogram's
/// observation count).
struct Sample {
    family: String,
    labels: HashMap<String, String>,
    value: f64,
}

/// The samples of one scrape, parsed by a Prometheus text-format parser.
pub struct Scrape(Vec<Sample>);

impl Scrape {
    /// Scrapes `metrics` (the listener's base URL).
    pub async fn take(setup: &Setup, metrics: &str) -> Self {
        let response = setup
            .client()
            .get(format!("{metrics}/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        let text = response.text().await.unwrap();
        let exposition = parse_prometheus(&text).expect("the scrape is Prometheus text");
        let mut samples = Vec::new();
        for (family, metrics) in &exposition.families {
            for sample in metrics.iter_samples() {
                let labelset = sample.get_labelset().unwrap();
                let labels = labelset
                    .iter()
                    .map(|(name, value)| (name.clone(), value.clone()))
                    .collect();
                let value = match &sample.value {
                    PrometheusValue::Counter(counter) => counter.value.as_f64(),
                    PrometheusValue::Gauge(number) | PrometheusValue::Unknown(number) => {
                        number.as_f64()
                    }
                    PrometheusValue::Histogram(histogram) => {
                        histogram.count.expect("a histogram count") as f64
                    }
                    PrometheusValue::Summary(_) => panic!("{family} is a summary"),
                };
                samples.push(Sample {
                    family: family.clone(),
                    labels,
                    value,
                });
            }
        }
        Self(samples)
    }

    /// The summed value of `family`'s samples whose labels include `labels`.
    /// The sum of `family`'s samples that carry `labels`.
    pub fn value(&self, family: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|sample| sample.family == family)
            .filter(|sample| {
                labels.iter().all(|(name, value)| {
                    sample.labels.get(*name).map(String::as_str) == Some(*value)
                })
            })
            .map(|sample| sample.value)
            .sum()
    }

    fn has(&self, family: &str) -> bool {
        self.0.iter().any(|sample| sample.family == family)
    }

    /// Every label value of every sample.
    fn label_values(&self) -> impl Iterator<Item = &String> {
        self.0.iter().flat_map(|sample| sample.labels.values())
    }
}

async fn get(setup: &Setup, server: &Server, path: &str) -> Value {
    setup
        .client()
        .get(format!("{}{path}", server.base))
        .bearer_auth(setup.token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A streamed turn on a new agent whose model calls the echo tool once.
async fn streamed_turn_with_a_tool_call(setup: &Setup, server: &Server, model: &ScriptedModel) {
    let echo = setup.upload_tool(server, "echo", ECHO).await;
    model.script(
        "inline",
        vec![
            Reply::tool_call("e1", "echo", json!({"say": "hi"})),
            Reply::text("Echoed."),
        ],
    );
    let agent = setup
        .agent(server, "inline", model, json!({ &echo: {} }))
        .await;
    let body = json!({"id": "conv-inline", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "echo"}]}], "trigger": "submit-message"});
    let stream = setup
        .client()
        .post(format!("{}/agents/{agent}/chat", server.base))
        .bearer_auth(setup.token())
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(stream.contains("tool-output-available"), "{stream}");
    assert!(stream.ends_with("data: [DONE]\n\n"), "{stream}");
    let invoked = setup
        .invoke(server, &echo, json!({"input": {"say": "again"}}))
        .await;
    assert_eq!(invoked["output"]["echo"]["say"], "again", "{invoked}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_scrape_shows_turns_calls_runners_and_the_lifecycle_moving(pool: PgPool) {
    let setup = Setup::new(&pool);
    let port = free_port();
    let metrics_bind = format!("127.0.0.1:{port}");
    let server = setup
        .start_with(100, &[("TOOLSERVER_METRICS_BIND", metrics_bind.as_str())])
        .await;
    let metrics = format!("http://{metrics_bind}");
    let model = ScriptedModel::start().await;
    // The warm pool (two workers by default) is full before the first call.
    until("two warm workers ready", || async {
        Scrape::take(&setup, &metrics)
            .await
            .value("toolserver_runner_warm_ready", &[("backend", "local")])
            == 2.0
    })
    .await;
    let before = Scrape::take(&setup, &metrics).await;
    assert_eq!(before.value("toolserver_turns_started_total", &[]), 0.0);
    assert_eq!(
        before.value("toolserver_runner_warm_claims_total", &[]),
        0.0
    );

    streamed_turn_with_a_tool_call(&setup, &server, &model).await;
    script(&model, Reply::text("Both jobs finished."));
    let status_id = setup.detached_turn(&server, &model).await;
    until("the detached turn to complete", || async {
        get(&setup, &server, &format!("/async/{status_id}")).await["status"] == "completed"
    })
    .await;
    // A run is counted once its commit returns, a moment after the status
    // it committed can be read.
    until("both detached runs to be counted", || async {
        Scrape::take(&setup, &metrics).await.value(
            "toolserver_detached_runs_total",
            &[("outcome", "committed")],
        ) >= 2.0
    })
    .await;

    let after = Scrape::take(&setup, &metrics).await;
    let requests = "toolserver_http_requests_total";
    for (route, method, status) in [
        ("/agents/{agentId}/chat", "POST", "200"),
        ("/accounts/me/tools/{toolId}/invoke", "POST", "200"),
        ("/agents/{agentId}/async", "POST", "202"),
        ("/sandbox-jobs/{resultId}/complete", "POST", "200"),
    ] {
        let labels = [("route", route), ("method", method), ("status", status)];
        assert!(
            after.value(requests, &labels) >= 1.0,
            "no {labels:?} in {requests}"
        );
    }
    assert_eq!(
        after.value(
            "toolserver_http_requests_total",
            &[("route", "/sandbox-jobs/{resultId}/complete")]
        ),
        2.0,
        "one completion per detached call"
    );
    assert!(
        after.value(
            "toolserver_http_request_duration_seconds",
            &[("route", "/agents/{agentId}/chat")]
        ) >= 1.0
    );

    // The streamed turn, the detached turn's first run and its continuation.
    assert_eq!(after.value("toolserver_turns_started_total", &[]), 3.0);
    assert_eq!(after.value("toolserver_turns_finished_total", &[]), 3.0);
    assert!(after.value("toolserver_turns_finished_total", &[("reason", "stop")]) >= 2.0);
    assert_eq!(after.value("toolserver_turn_duration_seconds", &[]), 3.0);
    assert_eq!(after.value("toolserver_turn_steps", &[]), 3.0);

    let uploaded_inline = [("kind", "uploaded"), ("mode", "inline"), ("outcome", "ok")];
    assert_eq!(
        after.value("toolserver_tool_calls_total", &uploaded_inline),
        1.0
    );
    let launched = [
        ("kind", "uploaded"),
        ("mode", "detached"),
        ("outcome", "launched"),
    ];
    assert_eq!(after.value("toolserver_tool_calls_total", &launched), 2.0);
    assert_eq!(
        after.value("toolserver_tool_call_duration_seconds", &launched),
        2.0
    );

    assert!(after.value("toolserver_runner_starts_total", &[("backend", "local")]) >= 2.0);
    assert!(
        after.value(
            "toolserver_runner_start_duration_seconds",
            &[("backend", "local")]
        ) >= 2.0
    );
    assert!(after.value("toolserver_runners_live", &[("backend", "local")]) >= 2.0);
    assert!(
        after.value(
            "toolserver_runner_warm_claims_total",
            &[("backend", "local")]
        ) >= 1.0,
        "a new tool's first start claimed a warm worker"
    );
    assert!(
        after.value("toolserver_runner_budget_runners", &[("state", "live")]) >= 2.0,
        "the runner budget counts the runners"
    );

    assert!(
        after.value(
            "toolserver_detached_runs_total",
            &[("outcome", "committed")]
        ) >= 2.0
    );
    assert_eq!(
        after.value("toolserver_async_calls", &[("status", "completed")]),
        2.0
    );
    assert_eq!(
        after.value("toolserver_async_calls", &[("status", "pending")]),
        0.0
    );
    assert_eq!(after.value("toolserver_continuation_backlog", &[]), 0.0);
    assert!(after.has("toolserver_continuation_backlog_oldest_seconds"));
    assert!(after.value("toolserver_db_pool_connections_max", &[]) >= 1.0);
    assert!(after.has("toolserver_db_pool_connections_in_use"));

    for value in after.label_values() {
        assert!(
            !(value.contains("agent_") || value.contains("tool_") || value.contains("conv-")),
            "a label carries an id: {value}"
        );
        assert!(
            uuid::Uuid::parse_str(value).is_err(),
            "a label is an id: {value}"
        );
    }
}

/// The families of one scrape, parsed by a Prometheus text-format parser.
async fn families(
    setup: &Setup,
    metrics: &str,
) -> MetricsExposition<PrometheusType, PrometheusValue> {
    let text = setup
        .client()
        .get(format!("{metrics}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    parse_prometheus(&text).expect("the scrape is Prometheus text")
}

#[sqlx::test(migrations = "../../migrations")]
async fn every_series_has_help_and_type_beside_the_process_and_build_series(pool: PgPool) {
    let setup = Setup::new(&pool);
    let port = free_port();
    let metrics_bind = format!("127.0.0.1:{port}");
    let server = setup
        .start_with(100, &[("TOOLSERVER_METRICS_BIND", metrics_bind.as_str())])
        .await;
    let metrics = format!("http://{metrics_bind}");
    let model = ScriptedModel::start().await;
    streamed_turn_with_a_tool_call(&setup, &server, &model).await;

    let exposition = families(&setup, &metrics).await;
    for (name, family) in &exposition.families {
        assert!(!family.help.trim().is_empty(), "{name} has no # HELP line");
        assert_ne!(
            family.family_type,
            PrometheusType::Unknown,
            "{name} has no # TYPE line"
        );
    }
    for (name, kind) in [
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("toolserver_build_info", "gauge"),
        ("toolserver_http_requests_total", "counter"),
        ("toolserver_tool_call_duration_seconds", "histogram"),
    ] {
        let family = exposition
            .families
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in the scrape"));
        assert_eq!(family.family_type.to_string(), kind, "{name}");
        assert!(family.iter_samples().count() > 0, "{name} has no sample");
    }
    let process = |name: &str| {
        let sample = exposition.families[name].iter_samples().next().unwrap();
        match &sample.value {
            PrometheusValue::Counter(counter) => counter.value.as_f64(),
            PrometheusValue::Gauge(number) => number.as_f64(),
            other => panic!("{name} is {other:?}"),
        }
    };
    assert!(process("process_resident_memory_bytes") > 0.0);
    assert!(process("process_open_fds") > 0.0);
    assert!(process("process_max_fds") >= process("process_open_fds"));
    assert!(
        process("process_start_time_seconds") > 1.0e9,
        "seconds since the epoch"
    );

    let builds: Vec<_> = exposition.families["toolserver_build_info"]
        .iter_samples()
        .collect();
    assert_eq!(builds.len(), 1, "one build");
    let labels = builds[0].get_labelset().unwrap();
    let version = labels
        .iter()
        .find(|(name, _)| name.as_str() == "version")
        .map(|(_, value)| value.clone());
    assert_eq!(version.as_deref(), Some(env!("CARGO_PKG_VERSION")));
    assert!(matches!(&builds[0].value, PrometheusValue::Gauge(one) if one.as_f64() == 1.0));
}
