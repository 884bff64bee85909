//! `/mcp` through the official MCP TypeScript SDK client (clients/mcp):
//! listing, plain and streaming calls, tool errors against protocol errors,
//! task-augmented calls polled to completion and cancelled (the runner call
//! stops), OAuth discovery, and tenancy.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;

use toolserver_testsupport::clients::client_dir;
use toolserver_testsupport::http::free_port;
use toolserver_testsupport::Reply;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

const ECHO: &str =
    "export default { async execute(ctx, input) { return { echoed: input.text }; } };";
const COUNTS: &str = "export default { async *execute(ctx, input) { for (let i = 1; i <= input.to; i++) { yield { count: i }; await new Promise(r => setTimeout(r, 30)); } } };";
const THROWS: &str = "export default { async execute() { throw new Error('the tool broke'); } };";
pub(crate) const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { slept: input.ms }; } };";
const HANGS: &str = "export default { async execute(ctx) { await new Promise((resolve, reject) => { ctx.signal.addEventListener('abort', () => reject(new Error('aborted'))); setTimeout(resolve, 60000); }); return 'late'; } };";

/// Runs the SDK client's `command` as `account` (no token with `None`).
async fn mcp(app: &TestApp, account: Option<&str>, command: &[&str]) -> Value {
    let mut node = tokio::process::Command::new("node");
    node.arg("bin/mcp.mjs")
        .args(command)
        .current_dir(client_dir("mcp"))
        .env("MCP_URL", format!("{}/mcp", app.base()));
    if let Some(account) = account {
        node.env("MCP_TOKEN", token(account));
    }
    let output = node.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the MCP client crashed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| {
        panic!(
            "{err}: {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn names(listing: &Value) -> Vec<String> {
    let mut names: Vec<String> = listing["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listing}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

fn text_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_sdk_lists_and_calls_an_accounts_tools_and_sees_progress_before_the_result(
    pool: PgPool,
) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_A, "echo", ECHO, text_schema()).await;
    app.upload(ACCOUNT_A, "counts", COUNTS, json!({"type": "object"}))
        .await;
    app.upload(ACCOUNT_A, "throws", THROWS, json!({"type": "object"}))
        .await;

    let listing = mcp(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(names(&listing), ["counts", "echo", "throws"], "{listing}");
    let echo = listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "echo")
        .unwrap();
    assert_eq!(echo["inputSchema"], text_schema(), "{echo}");
    assert_eq!(
        echo["_meta"]["io.modelcontextprotocol/tasks"]["taskSupport"], "optional",
        "{echo}"
    );

    let called = mcp(&app, Some(ACCOUNT_A), &["call", "echo", r#"{"text":"hi"}"#]).await;
    let result = &called["result"];
    assert_eq!(result["isError"], false, "{called}");
    assert_eq!(
        result["structuredContent"],
        json!({"echoed": "hi"}),
        "{called}"
    );
    assert_eq!(
        result["content"][0]["text"], r#"{"echoed":"hi"}"#,
        "{called}"
    );

    let streamed = mcp(&app, Some(ACCOUNT_A), &["call", "counts", r#"{"to":3}"#]).await;
    let progress = streamed["progress"].as_array().unwrap();
    assert_eq!(progress.len(), 3, "{streamed}");
    for (step, update) in progress.iter().enumerate() {
        assert_eq!(update["progress"], step + 1, "{streamed}");
        assert_eq!(update["message"], json!({"count": step + 1}).to_string());
    }
    assert_eq!(
        streamed["order"],
        json!(["progress", "progress", "progress", "result"]),
        "{streamed}"
    );
    assert_eq!(streamed["result"]["structuredContent"], json!({"count": 3}));

    // A failing tool and a bad input are tool errors the model can read;
    // an unknown tool is a protocol error.
    let failed = mcp(&app, Some(ACCOUNT_A), &["call", "throws", "{}"]).await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let text = failed["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("the tool broke"), "{failed}");
    let invalid = mcp(&app, Some(ACCOUNT_A), &["call", "echo", r#"{"text":5}"#]).await;
    assert_eq!(invalid["result"]["isError"], true, "{invalid}");
    let text = invalid["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("inputSchema"), "{invalid}");
    let unknown = mcp(&app, Some(ACCOUNT_A), &["call", "nope", "{}"]).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool: nope"),
        "{unknown}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn tools_list_pages_with_a_cursor(pool: PgPool) {
    let mut api = toolserver_api::ApiSettings::default();
    api.mcp.page_size = 2;
    let app = TestApp::live(pool).api(api).spawn().await;
    for name in ["a1", "a2", "a3", "a4", "a5"] {
        app.upload(ACCOUNT_A, name, ECHO, text_schema()).await;
    }
    let listing = mcp(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(names(&listing), ["a1", "a2", "a3", "a4", "a5"], "{listing}");
    assert_eq!(listing["pages"], 3, "{listing}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_task_is_polled_to_completion_and_another_account_cannot_see_it(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_A, "slow", SLOW, json!({"type": "object"}))
        .await;
    let created = mcp(&app, Some(ACCOUNT_A), &["task", "slow", r#"{"ms":4000}"#]).await;
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working", "{created}");
    assert_eq!(created["ttlMs"], 3_600_000, "{created}");
    let interval = created["pollIntervalMs"].as_u64().unwrap();
    assert!((125..=1000).contains(&interval), "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();

    let waited = mcp(&app, Some(ACCOUNT_A), &["wait", &id]).await;
    let task = &waited["task"];
    assert_eq!(task["status"], "completed", "{waited}");
    assert_eq!(task["result"]["structuredContent"], json!({"slept": 4000}));
    assert_eq!(waited["seen"][0], "working", "{waited}");

    // Another account's task id is not found, for reading and cancelling.
    let foreign = mcp(&app, Some(ACCOUNT_B), &["get", &id]).await;
    assert_eq!(foreign["error"]["code"], -32602, "{foreign}");
    assert!(foreign["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no such task"));
    let foreign = mcp(&app, Some(ACCOUNT_B), &["cancel", &id]).await;
    assert_eq!(foreign["error"]["code"], -32602, "{foreign}");
    assert_eq!(names(&mcp(&app, Some(ACCOUNT_B), &["list"]).await).len(), 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_cancelled_task_stops_its_runner_call(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let tool = app
        .upload(ACCOUNT_A, "hangs", HANGS, json!({"type": "object"}))
        .await;
    let created = mcp(&app, Some(ACCOUNT_A), &["task", "hangs", "{}"]).await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 1).await,
        "the call never started"
    );
    let cancelled = mcp(&app, Some(ACCOUNT_A), &["cancel", &id]).await;
    assert_eq!(cancelled["task"]["status"], "cancelled", "{cancelled}");
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 0).await,
        "the runner call outlived the cancel"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = mcp(&app, Some(ACCOUNT_A), &["get", &id]).await;
    assert_eq!(after["status"], "cancelled", "{after}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn without_a_token_the_answer_points_at_the_protected_resource_metadata(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let refused = app
        .client
        .post(format!("{}/mcp", app.base()))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let challenge = refused.headers()["www-authenticate"].to_str().unwrap();
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", app.base());
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    let forged = app
        .client
        .post(format!("{}/mcp", app.base()))
        .bearer_auth("not-a-token")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    assert!(forged.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Bearer error=\"invalid_token\""));

    let discovered = mcp(&app, None, &["discover"]).await;
    assert_eq!(
        discovered["metadata"]["resource"],
        format!("{}/mcp", app.base()),
        "{discovered}"
    );
    let without = mcp(&app, None, &["list"]).await;
    assert_eq!(without["error"]["code"], 401, "{without}");
}

/// An agent of account A whose config names account B's `/mcp`.
async fn agent_on_peer(app: &TestApp, model: &str, server: Value) -> (u16, Value) {
    let mut config = app.agent_config(model, json!({}));
    config["mcpServers"] = json!({ "peer": server });
    app.request(
        reqwest::Method::POST,
        "/agents",
        ACCOUNT_A,
        Some(json!({"name": model, "config": config})),
    )
    .await
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_agent_calls_the_tools_of_an_mcp_server_it_names(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_B, "echo", ECHO, text_schema()).await;
    app.upload(ACCOUNT_B, "throws", THROWS, json!({"type": "object"}))
        .await;
    app.upload(ACCOUNT_B, "hidden", ECHO, text_schema()).await;
    app.model.script(
        "remote",
        vec![
            Reply::tool_call("c1", "peer__echo", json!({"text": "hi"})).and_tool_call(
                "c2",
                "peer__throws",
                json!({}),
            ),
            Reply::text("done"),
        ],
    );
    let (status, created) = agent_on_peer(
        &app,
        "remote",
        json!({
            "url": format!("{}/mcp", app.base()),
            "auth": {"type": "bearer", "token": token(ACCOUNT_B)},
            "tools": ["echo", "throws"],
        }),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created["config"]["mcpServers"]["peer"]["auth"]["token"], "[redacted]",
        "{created}"
    );
    let agent = created["agentId"].as_str().unwrap().to_owned();

    let turn = app.say(ACCOUNT_A, &agent, "conv-mcp", "use the peer").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let outputs = turn.of_type("tool-output-available");
    assert_eq!(outputs.len(), 1, "{}", turn.body);
    assert_eq!(outputs[0]["toolCallId"], "c1");
    assert_eq!(
        outputs[0]["output"],
        json!({"echoed": "hi"}),
        "{}",
        turn.body
    );
    let errors = turn.of_type("tool-output-error");
    assert_eq!(errors.len(), 1, "{}", turn.body);
    assert!(
        errors[0]["errorText"]
            .as_str()
            .unwrap()
            .contains("the tool broke"),
        "{}",
        turn.body
    );
    // The model was offered the allowed remote tools, prefixed, with their schemas.
    let offered: Vec<Value> = app.model.requests("remote")[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"].clone())
        .collect();
    let mut names: Vec<&str> = offered
        .iter()
        .map(|function| function["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["peer__echo", "peer__throws"]);
    let echo = offered
        .iter()
        .find(|function| function["name"] == "peer__echo")
        .unwrap();
    assert_eq!(echo["parameters"], text_schema());
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_mcp_server_that_is_down_is_a_tool_error_not_a_failed_turn(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.model
        .script("offline", vec![Reply::text("nothing to call")]);
    let closed = free_port();
    let (status, created) = agent_on_peer(
        &app,
        "offline",
        json!({"url": format!("http://127.0.0.1:{closed}/mcp")}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let agent = created["agentId"].as_str().unwrap().to_owned();
    let turn = app.say(ACCOUNT_A, &agent, "conv-off", "hello").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert_eq!(turn.text(), "nothing to call");
    let offered = &app.model.requests("offline")[0];
    assert!(
        offered
            .get("tools")
            .is_none_or(|tools| tools.as_array().is_none_or(Vec::is_empty)),
        "{offered}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn mcp_servers_are_checked_when_an_agent_is_saved(pool: PgPool) {
    let app = TestApp::builder(pool).public_outbound_only().spawn().await;
    let config = |server: Value| {
        json!({"name": "mcp", "config": {
            "model": {"provider": "openai", "modelId": "m"},
            "mcpServers": {"docs": server},
        }})
    };
    for private in [
        "http://127.0.0.1:8080/mcp",
        "http://10.1.2.3/mcp",
        "http://localhost:9/mcp",
    ] {
        let reply = app
            .call(
                axum::http::Method::POST,
                "/agents",
                ACCOUNT_A,
                Some(config(json!({"url": private}))),
            )
            .await;
        assert_eq!(reply.status, 422, "{private}: {}", reply.json());
        assert_eq!(reply.json()["error"]["field"], "config.mcpServers.docs.url");
        assert!(
            reply.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a public address"),
            "{}",
            reply.json()
        );
    }
    let bad = app
        .call(
            axum::http::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(config(
                json!({"url": "https://203.0.114.7/mcp", "auth": {"type": "basic"}}),
            )),
        )
        .await;
    assert_eq!(bad.status, 422, "{}", bad.json());
    assert_eq!(
        bad.json()["error"]["field"],
        "config.mcpServers.docs.auth.type"
    );
}

/// One JSON-RPC request of the 2026-07-28 revision (no `initialize`: the
/// version, client and capabilities travel with every request), with the
/// `Mcp-Name` header a conforming client sends.
async fn current_revision(app: &TestApp, method: &str, params: Value, version: &str) -> Value {
    let named = params.get("name").or_else(|| params.get("taskId"));
    let name = named.and_then(Value::as_str).map(str::to_owned);
    revision_request(app, method, params, version, name.as_deref()).await
}

/// One JSON-RPC request of `version`, with `Mcp-Name: name` when given.
pub(crate) async fn revision_request(
    app: &TestApp,
    method: &str,
    params: Value,
    version: &str,
    name: Option<&str>,
) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    });
    let mut request = app
        .client
        .post(format!("{}/mcp", app.base()))
        .bearer_auth(token(ACCOUNT_A))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version)
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    let response = request
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert!(
        status == 200 || body.get("error").is_some(),
        "{status}: {body}"
    );
    body
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_current_revision_is_served_too_and_an_unsupported_one_is_refused(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_A, "slow", SLOW, json!({"type": "object"}))
        .await;
    let discovered = current_revision(&app, "server/discover", json!({}), "2026-07-28").await;
    assert_eq!(
        discovered["result"]["supportedVersions"],
        json!(["2025-11-25", "2026-07-28"]),
        "{discovered}"
    );
    let listed = current_revision(&app, "tools/list", json!({}), "2026-07-28").await;
    assert_eq!(listed["result"]["tools"][0]["name"], "slow", "{listed}");

    let created = current_revision(
        &app,
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 1000}}),
        "2026-07-28",
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let mut task = Value::Null;
    for _ in 0..100 {
        task = current_revision(&app, "tasks/get", json!({"taskId": id}), "2026-07-28").await;
        if task["result"]["status"] != "working" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(task["result"]["status"], "completed", "{task}");
    assert_eq!(
        task["result"]["result"]["structuredContent"],
        json!({"slept": 1000})
    );

    let refused = current_revision(&app, "tools/list", json!({}), "2025-03-26").await;
    assert_eq!(
        refused["error"]["message"], "Unsupported protocol version",
        "{refused}"
    );
    assert_eq!(
        refused["error"]["data"]["supported"],
        json!(["2025-11-25", "2026-07-28"]),
        "{refused}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_remote_tool_named_in_needs_approval_waits_for_a_person(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_B, "echo", ECHO, text_schema()).await;
    app.upload(ACCOUNT_B, "other", ECHO, text_schema()).await;
    app.model.script(
        "approve",
        vec![
            Reply::tool_call("c1", "peer__echo", json!({"text": "hi"})),
            Reply::text("waiting"),
        ],
    );
    let (status, created) = agent_on_peer(
        &app,
        "approve",
        json!({
            "url": format!("{}/mcp", app.base()),
            "auth": {"type": "bearer", "token": token(ACCOUNT_B)},
            "needsApproval": ["echo"],
        }),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let agent = created["agentId"].as_str().unwrap().to_owned();
    let turn = app.say(ACCOUNT_A, &agent, "conv-ap", "echo hi").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert_eq!(
        turn.of_type("tool-approval-request").len(),
        1,
        "{}",
        turn.body
    );
    assert!(
        turn.of_type("tool-output-available").is_empty(),
        "{}",
        turn.body
    );
    assert_eq!(turn.of_type("finish")[0]["finishReason"], "tool-calls");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_task_request_without_mcp_name_is_taken_as_its_params_name_it(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_A, "slow", SLOW, json!({"type": "object"}))
        .await;
    let created = current_revision(
        &app,
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 3000}}),
        "2026-07-28",
    )
    .await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();

    let unnamed = |method: &'static str| {
        let (app, id) = (&app, id.clone());
        async move { revision_request(app, method, json!({"taskId": id}), "2026-07-28", None).await }
    };
    let polled = unnamed("tasks/get").await;
    assert_eq!(polled["result"]["status"], "working", "{polled}");
    assert_eq!(polled["result"]["taskId"], id.as_str(), "{polled}");

    // A header that names another task is refused, before the task is touched.
    let mismatched = revision_request(
        &app,
        "tasks/cancel",
        json!({"taskId": id}),
        "2026-07-28",
        Some("another-task"),
    )
    .await;
    assert_eq!(mismatched["error"]["code"], -32020, "{mismatched}");

    let cancelled = unnamed("tasks/cancel").await;
    assert!(cancelled.get("error").is_none(), "{cancelled}");
    let after = unnamed("tasks/get").await;
    assert_eq!(after["result"]["status"], "cancelled", "{after}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_task_still_working_at_its_ttl_is_stopped_on_its_runner(pool: PgPool) {
    let mut api = toolserver_api::ApiSettings::default();
    api.mcp.task_ttl = Duration::from_secs(2);
    let app = TestApp::live(pool).api(api).spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "hangs", HANGS, json!({"type": "object"}))
        .await;
    let created = mcp(&app, Some(ACCOUNT_A), &["task", "hangs", "{}"]).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 1).await,
        "the call never started"
    );
    // No client polls it: at its TTL the runner call is stopped all the same.
    assert!(
        app.comes_to_inflight(ACCOUNT_A, &tool, 0).await,
        "the runner call outlived its task's TTL"
    );
    let gone = mcp(&app, Some(ACCOUNT_A), &["get", &id]).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
}
