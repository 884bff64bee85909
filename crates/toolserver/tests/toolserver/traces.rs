//! Trace export over OTLP/HTTP, received in this process: a turn started
//! with a W3C `traceparent` is one trace under the caller's span, with the
//! model calls and the runner call as child spans, and the model request
//! carries the trace on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::json;
use sqlx::PgPool;
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::server::Setup;

const ECHO: &str =
    "export default { execute(ctx, input) { return { echo: input, traceparent: ctx.traceparent }; } };";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// One exported span.
#[derive(Debug, Clone)]
struct Exported {
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
}

type Received = Arc<Mutex<Vec<Exported>>>;

async fn receive(State(received): State<Received>, body: Bytes) -> &'static str {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
    let spans = request
        .resource_spans
        .into_iter()
        .flat_map(|resource| resource.scope_spans)
        .flat_map(|scope| scope.spans)
        .map(|span| Exported {
            trace_id: hex::encode(span.trace_id),
            span_id: hex::encode(span.span_id),
            parent_span_id: hex::encode(span.parent_span_id),
            name: span.name,
        });
    received.lock().unwrap().extend(spans);
    ""
}

/// An OTLP/HTTP trace receiver on loopback; answers its base URL.
async fn collector(received: Received) -> String {
    let app = Router::new()
        .route("/v1/traces", post(receive))
        .with_state(received);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

/// The names on the way from `span` up to the root of its trace.
fn ancestry(spans: &[Exported], span: &Exported) -> Vec<String> {
    let mut names = Vec::new();
    let mut parent = span.parent_span_id.clone();
    while let Some(up) = spans.iter().find(|s| s.span_id == parent) {
        names.push(up.name.clone());
        parent = up.parent_span_id.clone();
    }
    names
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_turn_is_one_trace_under_the_callers_span_with_model_and_runner_calls(pool: PgPool) {
    let received = Received::default();
    let endpoint = collector(received.clone()).await;
    let setup = Setup::new(&pool);
    let mut server = setup
        .start_with(100, &[("TOOLSERVER_OTLP_ENDPOINT", endpoint.as_str())])
        .await;
    let model = ScriptedModel::start().await;
    let seen_by_model: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = seen_by_model.clone();
    model.respond_with("traced", move |body, headers| {
        if let Some(traceparent) = headers.get("traceparent") {
            seen.lock()
                .unwrap()
                .push(traceparent.to_str().unwrap().to_owned());
        }
        let after_tool = body["messages"]
            .as_array()
            .is_some_and(|messages| messages.iter().any(|m| m["role"] == "tool"));
        match after_tool {
            false => Reply::tool_call("e1", "echo", json!({"say": "hi"})),
            true => Reply::text("Echoed."),
        }
    });
    let echo = setup.upload_tool(&server, "echo", ECHO).await;
    let agent = setup
        .agent(&server, "traced", &model, json!({ &echo: {} }))
        .await;
    let body = json!({"id": "conv-traced", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "echo"}]}], "trigger": "submit-message"});
    let stream = setup
        .client()
        .post(format!("{}/agents/{agent}/chat", server.base))
        .bearer_auth(setup.token())
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(stream.contains("tool-output-available"), "{stream}");

    // SIGTERM: the server flushes what it has not exported yet.
    let pid = server.child.id().to_string();
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(signalled.success());
    let exited = tokio::task::spawn_blocking(move || {
        let status = server.child.wait();
        (server, status)
    });
    let (_server, status) = tokio::time::timeout(Duration::from_secs(30), exited)
        .await
        .expect("the server stops on SIGTERM")
        .unwrap();
    assert!(status.unwrap().success());

    let spans = received.lock().unwrap().clone();
    let ours: Vec<&Exported> = spans.iter().filter(|s| s.trace_id == TRACE_ID).collect();
    let named = |name: &str| {
        ours.iter()
            .filter(|s| s.name == name)
            .copied()
            .collect::<Vec<_>>()
    };
    let requests = named("request");
    let chat = requests
        .iter()
        .find(|s| s.parent_span_id == CALLER_SPAN)
        .expect("the chat request continues the caller's trace under its span");
    let models = named("model_call");
    assert_eq!(models.len(), 2, "two model passes: {ours:#?}");
    let runners = named("runner_call");
    assert_eq!(runners.len(), 1, "one runner call: {ours:#?}");
    let handed = format!("00-{TRACE_ID}-{}-01", runners[0].span_id);
    assert!(
        stream.contains(&format!("\"traceparent\":\"{handed}\"")),
        "the tool saw ctx.traceparent naming its runner_call span ({handed}): {stream}"
    );
    for span in models.iter().chain(&runners) {
        let up = ancestry(&spans, span);
        assert!(
            up.contains(&"turn".to_owned()) && up.last() == Some(&chat.name),
            "{} hangs under the turn and the request: {up:?}",
            span.name
        );
    }
    assert!(
        spans
            .iter()
            .all(|s| s.name != "model_call" || s.trace_id == TRACE_ID),
        "the turn is one trace"
    );

    let carried = seen_by_model.lock().unwrap().clone();
    assert_eq!(
        carried.len(),
        2,
        "each model request carries the trace: {carried:?}"
    );
    for (traceparent, span) in carried.iter().zip(&models) {
        assert!(
            traceparent.starts_with(&format!("00-{TRACE_ID}-")),
            "{traceparent}"
        );
        assert!(
            models.iter().any(|m| traceparent.contains(&m.span_id)),
            "{traceparent} names a model_call span ({})",
            span.span_id
        );
    }
}
