//! The AI SDK's `useChat` in headless Chromium against the running server
//! from another origin: `clients/browser/test/browser.test.mjs`, driven from
//! here with a scenarios file; afterwards, the stopped turn's runner call
//! has ended. One scenario decides an approval with curl after its page
//! closed.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_api::cors::CorsSettings;
use toolserver_api::ApiSettings;
use toolserver_testsupport::clients::client_dir;
use toolserver_testsupport::http::free_port;
use toolserver_testsupport::Reply;

use crate::app::TestApp;
use crate::support::*;

const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 200)); return { done: input.job }; } };";
const LONG: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 1500)); return { done: input.job }; } };";
const JOB: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 1500)); return { finished: input.job }; } };";
const HANGS: &str = "export default { async execute(ctx) { await new Promise(() => {}); } };";

fn job_schema() -> Value {
    json!({"type": "object", "properties": {"job": {"type": "string"}}})
}

/// An agent whose turn calls `tool` (named `name`, with `input`) and then
/// answers `text`.
async fn agent_calling(
    app: &TestApp,
    model: &str,
    (tool, name): (&str, &str),
    input: Value,
    options: Value,
    text: &str,
) -> String {
    app.model.script(
        model,
        vec![
            Reply::tool_call("c1", name, input),
            Reply::text(text).chunk_delay(Duration::from_millis(20)),
        ],
    );
    app.agent(ACCOUNT_A, model, json!({ tool: options })).await
}

#[sqlx::test(migrations = "../../migrations")]
async fn use_chat_in_chromium_on_another_origin(pool: PgPool) {
    let dir = client_dir("browser");
    assert!(
        dir.join("node_modules/playwright-core").exists()
            && std::path::Path::new("/usr/bin/chromium").exists(),
        "clients/browser needs its packages and Debian's chromium: run `make test-deps`"
    );
    let page_port = free_port();
    let page_origin = format!("http://127.0.0.1:{page_port}");
    let cors = CorsSettings::parse(
        std::slice::from_ref(&page_origin),
        &["GET".to_owned(), "POST".to_owned()],
        &["authorization".to_owned(), "content-type".to_owned()],
        false,
        Duration::from_secs(600),
    )
    .unwrap();
    let api = ApiSettings {
        cors,
        ..ApiSettings::default()
    };
    let app = TestApp::live(pool).api(api).spawn().await;

    let slow = app.upload(ACCOUNT_A, "slow", SLOW, job_schema()).await;
    let long = app.upload(ACCOUNT_A, "long", LONG, job_schema()).await;
    let job = app.upload(ACCOUNT_A, "job", JOB, job_schema()).await;
    let hangs = app
        .upload(ACCOUNT_A, "hangs", HANGS, json!({"type": "object"}))
        .await;
    let turn = agent_calling(
        &app,
        "b-turn",
        (&slow, "slow"),
        json!({"job": "t"}),
        json!({}),
        "Answered in a browser.",
    )
    .await;
    let reload = agent_calling(
        &app,
        "b-reload",
        (&long, "long"),
        json!({"job": "r"}),
        json!({}),
        "Resumed after a reload.",
    )
    .await;
    app.model.script(
        "b-detached",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "d"})),
            Reply::text("Job started."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("Job finished."),
        ],
    );
    let detached = app
        .agent(ACCOUNT_A, "b-detached", json!({ &job: {"async": true} }))
        .await;
    let stop = agent_calling(
        &app,
        "b-stop",
        (&hangs, "hangs"),
        json!({}),
        json!({}),
        "never said",
    )
    .await;
    let approval = agent_calling(
        &app,
        "b-approval",
        (&slow, "slow"),
        json!({"job": "a"}),
        json!({"needsApproval": true}),
        "Approved and done.",
    )
    .await;
    let browser = json!({
        "pagePort": page_port,
        "approval": {"agentId": approval, "expectText": "Approved and done.", "expectOutput": {"done": "a"}},
        "turn": {"agentId": turn, "expectText": "Answered in a browser.", "expectOutput": {"done": "t"}},
        "reload": {"agentId": reload, "expectText": "Resumed after a reload.", "expectOutput": {"done": "r"}},
        "detached": {"agentId": detached, "expectText": "Job finished."},
        "stop": {"agentId": stop},
    });

    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        serde_json::to_vec(&json!({ "browser": browser })).unwrap(),
    )
    .unwrap();
    let output = tokio::process::Command::new("node")
        .args(["--test", "--test-reporter=spec", "test/"])
        .current_dir(&dir)
        .env("TOOLSERVER_URL", app.base())
        .env("TOOLSERVER_TOKEN", token(ACCOUNT_A))
        .env("TOOLSERVER_SCENARIOS", file.path())
        .output()
        .await
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the browser test failed:\n{report}"
    );
    let passed = report
        .lines()
        .filter(|l| l.trim_start().starts_with('✔'))
        .count();
    assert!(passed >= 5, "expected 5 passing browser tests:\n{report}");
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &hangs, 0).await,
        "the stopped turn's runner call ended"
    );
}
