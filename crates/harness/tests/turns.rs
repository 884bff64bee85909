//! The turn loop driven directly (no HTTP in front): paths that cannot ask a
//! person deny approvals visibly, and tool calls of one pass run at most
//! `max_parallel_tool_calls` at a time.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::PgPool;
use tokio::sync::mpsc;
use toolserver_domain::AccountId;
use toolserver_harness::outbound::{self, OutboundPolicy};
use toolserver_harness::runner_call::RunnerCallSettings;
use toolserver_harness::sealing::SecretBox;
use toolserver_harness::tools::{ConfigSource, TavilySettings, ToolSources};
use toolserver_harness::turn::{run_turn, TurnOutcome, TurnPlan};
use toolserver_harness::ui::{UiChunk, UiMessage};
use toolserver_harness::{Harness, HarnessSettings};
use toolserver_testsupport::{Reply, ScriptedModel};

/// Tavily's `/search`, answering after `delay` and recording when each
/// request started and ended.
async fn fake_tavily(delay: Duration) -> (url::Url, Arc<Mutex<Vec<(Instant, Instant)>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let record = spans.clone();
    let app = axum::Router::new().route(
        "/search",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let record = record.clone();
            async move {
                let started = Instant::now();
                tokio::time::sleep(delay).await;
                record.lock().unwrap().push((started, Instant::now()));
                axum::Json(json!({"results": [{"title": body["query"]}]}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = url::Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, spans)
}

async fn harness(pool: PgPool, tavily: url::Url) -> (Harness, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let signer =
        toolserver_bundles::UrlSigner::new(b"k".to_vec(), url::Url::parse("http://t/").unwrap())
            .unwrap();
    let bundles = toolserver_bundles::FsBundleStore::open(dir.path().join("bundles"), signer)
        .await
        .unwrap();
    let executor = toolserver_sandbox::LocalExecutor::new(toolserver_sandbox::LocalSettings {
        node_binary: "node".into(),
        root: dir.path().join("runners"),
        idle_timeout: Duration::from_secs(60),
        start_timeout: Duration::from_secs(10),
        kill_grace: Duration::from_secs(1),
        isolation: toolserver_sandbox::IsolationMode::None,
        bwrap_binary: "bwrap".into(),
        egress: Default::default(),
        limits: Default::default(),
    })
    .unwrap();
    let policy = OutboundPolicy {
        allow_private: true,
    };
    let sources = ToolSources {
        pool,
        executor: Arc::new(executor),
        bundles: Arc::new(bundles),
        runner: RunnerCallSettings {
            inline_bundle_max_bytes: 65_536,
            signed_url_ttl: Duration::from_secs(60),
            max_output_bytes: 1 << 20,
        },
        tavily: TavilySettings {
            base_url: tavily,
            fallback_api_key: Some("tvly-server".into()),
        },
        sealer: SecretBox::new(&[1; 32]),
        fetch_url: None,
        http: outbound::client(&policy, Duration::from_secs(2)).unwrap(),
        policy,
        default_tool_timeout: Duration::from_secs(10),
        breakers: std::sync::Arc::new(toolserver_harness::tools::Breakers::new(
            toolserver_harness::tools::BreakerSettings::DEFAULT,
        )),
        mcp: std::sync::Arc::new(
            toolserver_harness::tools::McpClients::with_defaults(
                toolserver_harness::outbound::OutboundPolicy {
                    allow_private: true,
                },
            )
            .unwrap(),
        ),
    };
    (Harness::new(sources, HarnessSettings::default()), dir)
}

async fn turn(
    harness: &Harness,
    model: &ScriptedModel,
    model_id: &str,
    tools: Value,
    parallel: usize,
    can_ask: bool,
) -> (TurnOutcome, Vec<UiChunk>) {
    let config = json!({
        "model": {"provider": "openai", "modelId": model_id},
        "provider": {"openai": {"baseUrl": model.base_url()}},
        "tools": tools,
    });
    let account = AccountId::parse("acct").unwrap();
    let checked = harness
        .check(&account, &config, ConfigSource::Saving)
        .await
        .unwrap();
    let provider = harness.provider(&checked.config).unwrap();
    let history: Vec<std::sync::Arc<UiMessage>> = serde_json::from_value(
        json!([{"id": "u", "role": "user", "parts": [{"type": "text", "text": "go"}]}]),
    )
    .unwrap();
    let plan = TurnPlan {
        system: None,
        model_id: model_id.into(),
        options: Default::default(),
        max_steps: 5,
        max_parallel_tool_calls: parallel,
        max_duration: Duration::from_secs(30),
        can_ask_approval: can_ask,
        detach: None,
        durable_status: None,
        arrivals: Vec::new(),
        history,
        assistant: UiMessage::assistant("m".into()),
        request_key: None,
        stop: Default::default(),
        ledger: None,
        restate_decided: false,
        authorizer: None,
    };
    let (sender, mut receiver) = mpsc::channel(256);
    let collector = tokio::spawn(async move {
        let mut chunks = Vec::new();
        while let Some(chunk) = receiver.recv().await {
            chunks.push(chunk);
        }
        chunks
    });
    let outcome = run_turn(provider, checked.registry, plan, sender).await;
    (outcome, collector.await.unwrap())
}

#[sqlx::test(migrations = "../../migrations")]
async fn paths_that_cannot_ask_deny_approvals_visibly(pool: PgPool) {
    let (tavily, spans) = fake_tavily(Duration::ZERO).await;
    let (harness, _dir) = harness(pool, tavily).await;
    let model = ScriptedModel::start().await;
    model.script(
        "deny",
        vec![
            Reply::tool_call("c1", "tavilySearch", json!({"query": "x"})),
            Reply::text("Could not search."),
        ],
    );
    let tools = json!({"tavilySearch": {"needsApproval": true}});
    let (outcome, chunks) = turn(&harness, &model, "deny", tools, 4, false).await;
    let error = chunks.iter().find_map(|c| match c {
        UiChunk::ToolOutputError {
            tool_call_id,
            error_text,
        } if tool_call_id == "c1" => Some(error_text.clone()),
        _ => None,
    });
    assert!(error.unwrap().contains("cannot ask"), "{chunks:?}");
    assert!(!chunks
        .iter()
        .any(|c| matches!(c, UiChunk::ToolApprovalRequest { .. })));
    assert!(
        spans.lock().unwrap().is_empty(),
        "the tool ran without approval"
    );
    assert_eq!(outcome.finish_reason.as_deref(), Some("stop"));
    assert_eq!(outcome.assistant.text(), "Could not search.");
    let told = model.requests("deny")[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        told["content"].as_str().unwrap().contains("cannot ask"),
        "{told}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn calls_of_one_pass_run_up_to_the_parallel_limit(pool: PgPool) {
    let delay = Duration::from_millis(200);
    for (parallel, overlapping) in [(1, false), (3, true)] {
        let (tavily, spans) = fake_tavily(delay).await;
        let (harness, _dir) = harness(pool.clone(), tavily).await;
        let model = ScriptedModel::start().await;
        let calls = Reply::tool_call("c1", "tavilySearch", json!({"query": "a"}))
            .and_tool_call("c2", "tavilySearch", json!({"query": "b"}))
            .and_tool_call("c3", "tavilySearch", json!({"query": "c"}));
        model.script("parallel", vec![calls, Reply::text("ok")]);
        let (outcome, chunks) = turn(
            &harness,
            &model,
            "parallel",
            json!({"tavilySearch": {}}),
            parallel,
            true,
        )
        .await;
        assert_eq!(outcome.finish_reason.as_deref(), Some("stop"), "{chunks:?}");
        let outputs = chunks
            .iter()
            .filter(|c| matches!(c, UiChunk::ToolOutputAvailable { .. }))
            .count();
        assert_eq!(outputs, 3);
        let mut spans = spans.lock().unwrap().clone();
        spans.sort();
        let overlap = spans.windows(2).any(|pair| pair[1].0 < pair[0].1);
        assert_eq!(overlap, overlapping, "limit {parallel}: {spans:?}");
    }
}
