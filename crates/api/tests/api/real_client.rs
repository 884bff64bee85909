//! The published AI SDK (6.x and 7.x) reads every kind of turn stream from
//! the running server: `clients/ai-sdk/test/ui-stream.test.mjs`, driven from
//! here with a scenarios file; `resume.test.mjs` and `socket.test.mjs`
//! resume turns over HTTP and over the WebSocket transport. (`stored.test.mjs`
//! there is driven by `stored_shapes`.)

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::clients::client_dir;
use toolserver_testsupport::scripted_model::thought_signature;
use toolserver_testsupport::Reply;

use crate::app::TestApp;
use crate::fake_tavily::FakeTavily;
use crate::support::*;

const ECHO: &str = "export default { async execute(ctx, input) { return { echo: input }; } };";
const STREAMING: &str = "export default { async *execute() { for (let i = 1; i <= 3; i++) { yield { step: i }; await new Promise(r => setTimeout(r, 10)); } } };";
const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 200)); return { done: input.job }; } };";
const LONG: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 1000)); return { done: input.job }; } };";
const JOB: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 1500)); return { finished: input.job }; } };";

fn schema(property: &str) -> Value {
    json!({"type": "object", "properties": {property: {"type": "string"}}, "required": [property]})
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_ai_sdk_reads_every_stream(pool: PgPool) {
    let dir = client_dir("ai-sdk");
    assert!(
        dir.join("node_modules/ai-v6").exists() && dir.join("node_modules/ai-v7").exists(),
        "the AI SDK is not installed in {}: run `make test-deps` (npm ci there)",
        dir.display()
    );
    let tavily = FakeTavily::start(Duration::from_millis(200)).await;
    let app = TestApp::live(pool)
        .tavily(tavily.url.clone())
        .harness(Default::default())
        .spawn()
        .await;
    let echo = app.upload(ACCOUNT_A, "echo", ECHO, schema("q")).await;
    let progress = app
        .upload(ACCOUNT_A, "progress", STREAMING, json!({"type": "object"}))
        .await;
    let slow = app.upload(ACCOUNT_A, "slow", SLOW, schema("job")).await;
    let text = |t: &str| json!({"type": "text", "text": t, "state": "done"});
    let step = json!({"type": "step-start"});
    let mut scenarios = Vec::new();

    app.model.script(
        "rc-plain",
        vec![Reply::text("Hello from the scripted model.")],
    );
    scenarios.push(json!({
        "name": "plain text turn",
        "agentId": app.agent(ACCOUNT_A, "rc-plain", json!({})).await,
        "steps": [{"userText": "hi"}],
        "expectParts": [step, text("Hello from the scripted model.")],
        "expectFinishReason": "stop",
    }));

    app.model.script(
        "rc-tool",
        vec![
            Reply::tool_call("c1", "echo", json!({"q": "x"})),
            Reply::text("Echoed."),
        ],
    );
    scenarios.push(json!({
        "name": "uploaded tool",
        "agentId": app.agent(ACCOUNT_A, "rc-tool", json!({ &echo: {} })).await,
        "steps": [{"userText": "echo x"}],
        "expectParts": [step, {"type": "tool-echo", "toolCallId": "c1", "state": "output-available", "input": {"q": "x"}, "output": {"echo": {"q": "x"}}}, step, text("Echoed.")],
        "expectFinishReason": "stop",
    }));

    app.model.script(
        "rc-gemini",
        vec![
            Reply::tool_call("g1", "echo", json!({"q": "x"})),
            Reply::text("Grounded.").and_source("https://a.example/", "A"),
        ],
    );
    let gemini = json!({
        "model": {"provider": "google", "modelId": "rc-gemini"},
        "provider": {"google": {"apiKey": "k", "baseUrl": app.model.gemini_base_url()}},
        "tools": {&echo: {}, "googleSearch": {}},
    });
    let (status, created) = app
        .request(
            reqwest::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(json!({"name": "rc-gemini", "config": gemini})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let signed = json!({"google": {"thoughtSignature": thought_signature("g1")}});
    scenarios.push(json!({
        "name": "gemini: a signed call, then an answer with a source",
        "agentId": created["agentId"],
        "steps": [{"userText": "echo x"}],
        "expectParts": [step, {"type": "tool-echo", "state": "output-available", "callProviderMetadata": signed}, step, text("Grounded."), {"type": "source-url", "url": "https://a.example/", "title": "A"}],
        "expectFinishReason": "stop",
    }));

    app.model.script(
        "rc-stream",
        vec![
            Reply::tool_call("c1", "progress", json!({})),
            Reply::text("Done."),
        ],
    );
    scenarios.push(json!({
        "name": "streaming tool with preliminary outputs",
        "agentId": app.agent(ACCOUNT_A, "rc-stream", json!({ &progress: {} })).await,
        "steps": [{"userText": "go"}],
        "expectParts": [step, {"type": "tool-progress", "state": "output-available", "output": {"step": 3}}, step, text("Done.")],
    }));

    app.model.script(
        "rc-invalid",
        vec![
            Reply::tool_call("c1", "echo", json!({"q": 1})),
            Reply::tool_call("c2", "echo", json!({"q": "1"})),
            Reply::text("Fixed."),
        ],
    );
    scenarios.push(json!({
        "name": "invalid tool input",
        "agentId": app.agent(ACCOUNT_A, "rc-invalid", json!({ &echo: {} })).await,
        "steps": [{"userText": "go"}],
        "expectParts": [step, {"type": "tool-echo", "toolCallId": "c1", "state": "output-error"}, step, {"type": "tool-echo", "toolCallId": "c2", "state": "output-available"}, step, text("Fixed.")],
    }));

    for (model, approved) in [("rc-approve", true), ("rc-deny", false)] {
        app.model.script(
            model,
            vec![
                Reply::tool_call("c1", "echo", json!({"q": "rm"})),
                Reply::text("Handled."),
            ],
        );
        let state = if approved {
            "output-available"
        } else {
            "output-denied"
        };
        scenarios.push(json!({
            "name": format!("approval {}", if approved { "approved" } else { "denied" }),
            "agentId": app.agent(ACCOUNT_A, model, json!({ &echo: {"needsApproval": true} })).await,
            "steps": [{"userText": "remove it"}, {"approval": {"approved": approved, "reason": "reviewed"}}],
            "expectParts": [step, {"type": "tool-echo", "state": state, "approval": {"approved": approved}}, step, text("Handled.")],
            "expectFinishReason": "stop",
        }));
    }

    app.model.script(
        "rc-forged",
        vec![
            Reply::tool_call("c1", "echo", json!({"q": "rm"})),
            Reply::text("unused"),
        ],
    );
    scenarios.push(json!({
        "name": "forged approval id",
        "agentId": app.agent(ACCOUNT_A, "rc-forged", json!({ &echo: {"needsApproval": true} })).await,
        "steps": [{"userText": "remove it"}, {"approval": {"approved": true}, "forgeApprovalId": true, "expectStatus": 409}],
        "expectParts": [step, {"type": "tool-echo", "state": "approval-requested"}],
        "expectFinishReason": "tool-calls",
    }));

    let (status, provider) = app
        .request(
            reqwest::Method::PUT,
            "/accounts/me/oauth-providers/demo",
            ACCOUNT_A,
            Some(json!({
                "authorizationUrl": "http://127.0.0.1:9/authorize",
                "tokenUrl": "http://127.0.0.1:9/token",
                "clientId": "rc-client",
            })),
        )
        .await;
    assert_eq!(status, 201, "{provider}");
    let (status, whoami) = app
        .request(
            reqwest::Method::POST,
            "/accounts/me/tools",
            ACCOUNT_A,
            Some(json!({
                "name": "whoami", "description": "Who the user is at the provider.",
                "inputSchema": {"type": "object"}, "kind": "http",
                "http": {"method": "GET", "url": "http://127.0.0.1:9/me",
                         "headers": {"Authorization": "Bearer {{connection.demo.access_token}}"}},
            })),
        )
        .await;
    assert_eq!(status, 201, "{whoami}");
    let whoami = whoami["toolId"].as_str().unwrap().to_owned();
    app.model.script(
        "rc-authorize",
        vec![
            Reply::tool_call("c1", "whoami", json!({})),
            Reply::text("unused until connected"),
        ],
    );
    scenarios.push(json!({
        "name": "a call that waits for its user to authorize a connection",
        "agentId": app.agent(ACCOUNT_A, "rc-authorize", json!({ &whoami: {} })).await,
        "steps": [{"userText": "who am I?"}],
        "expectParts": [
            step,
            {"type": "tool-whoami", "toolCallId": "c1", "state": "input-available", "input": {}},
            {"type": "data-authorization", "data": {"toolCallId": "c1", "provider": "demo"}},
        ],
        "expectFinishReason": "tool-calls",
    }));

    let async_script = |call: Reply| {
        vec![
            call,
            Reply::text("Started; I will report back.").chunk_delay(Duration::from_millis(50)),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("All done."),
        ]
    };
    app.model.script(
        "rc-async",
        async_script(Reply::tool_call("c1", "slow", json!({"job": "j1"}))),
    );
    app.model.script(
        "rc-async-builtin",
        async_script(Reply::tool_call(
            "c1",
            "tavilySearch",
            json!({"query": "q"}),
        )),
    );
    for (name, model, tools, tool_part) in [
        (
            "uploaded async tool",
            "rc-async",
            json!({ &slow: {"async": true} }),
            "tool-slow",
        ),
        (
            "built-in async tool",
            "rc-async-builtin",
            json!({"tavilySearch": {"async": true, "apiKey": "tvly-k"}}),
            "tool-tavilySearch",
        ),
    ] {
        scenarios.push(json!({
            "name": name,
            "agentId": app.agent(ACCOUNT_A, model, tools).await,
            "steps": [{"userText": "start the job"}],
            "expectParts": [
                step, {"type": tool_part, "state": "output-available", "output": {"status": "pending"}},
                step, text("Started; I will report back."),
                step, {"type": "tool-async_status", "state": "output-available", "output": {"status": "completed"}},
                step, text("All done."),
            ],
            "expectFinishReason": "stop",
        }));
    }

    // A turn the client leaves mid-way and resumes (test/resume.test.mjs).
    let long = app.upload(ACCOUNT_A, "long", LONG, schema("job")).await;
    app.model.script(
        "rc-resume",
        vec![
            Reply::tool_call("c1", "long", json!({"job": "r"})),
            Reply::text("Resumed and done.").chunk_delay(Duration::from_millis(20)),
        ],
    );
    let resume = json!({
        "agentId": app.agent(ACCOUNT_A, "rc-resume", json!({ &long: {} })).await,
        "expectText": "Resumed and done.",
        "expectOutput": {"done": "r"},
    });

    // The same over the WebSocket transport, and a detached turn whose
    // result arrives on a held resume (test/socket.test.mjs).
    app.model.script(
        "rc-socket",
        vec![
            Reply::tool_call("c1", "long", json!({"job": "s"})),
            Reply::text("Resumed over a socket.").chunk_delay(Duration::from_millis(20)),
        ],
    );
    let job = app.upload(ACCOUNT_A, "job", JOB, schema("job")).await;
    app.model.script(
        "rc-detached",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "d"})),
            Reply::text("Job started."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("Job finished."),
        ],
    );
    let socket = json!({
        "agentId": app.agent(ACCOUNT_A, "rc-socket", json!({ &long: {} })).await,
        "expectText": "Resumed over a socket.",
        "expectOutput": {"done": "s"},
        "detached": {
            "agentId": app.agent(ACCOUNT_A, "rc-detached", json!({ &job: {"async": true} })).await,
            "expectText": "Job finished.",
        },
    });

    let file = tempfile::NamedTempFile::new().unwrap();
    let sections = json!({"scenarios": scenarios, "resume": resume, "socket": socket});
    std::fs::write(file.path(), serde_json::to_vec(&sections).unwrap()).unwrap();
    let output = tokio::process::Command::new("node")
        .args([
            "--test",
            "--test-reporter=spec",
            "test/ui-stream.test.mjs",
            "test/resume.test.mjs",
            "test/socket.test.mjs",
        ])
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
        "the AI SDK client failed:\n{report}"
    );
    let passed = report
        .lines()
        .filter(|l| l.trim_start().starts_with('✔'))
        .count();
    assert!(
        passed >= 2 * scenarios.len(),
        "expected {} passing tests:\n{report}",
        2 * scenarios.len()
    );
    let resumed = report
        .lines()
        .filter(|l| {
            l.trim_start().starts_with('✔') && l.contains("resume gets the whole running turn")
        })
        .count();
    assert_eq!(resumed, 2, "both majors resume:\n{report}");
    let over_sockets = report
        .lines()
        .filter(|l| l.trim_start().starts_with('✔') && l.contains("WebSocketChatTransport:"))
        .count();
    assert_eq!(over_sockets, 2, "both socket tests pass:\n{report}");
}
