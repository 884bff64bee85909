//! Agents as clients of MCP servers they name: calling their tools, a
//! server that is down as a tool error, servers checked when the agent is
//! saved, servers that answer late, and remote tools that need approval.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use toolserver_testsupport::http::free_port;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::Reply;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

use super::{text_schema, ECHO, THROWS};

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

/// A server on loopback that takes connections and answers none until it
/// is released; then it passes each to `target`'s port.
struct HeldServer {
    port: u16,
    accepted: Arc<AtomicUsize>,
    release: watch::Sender<bool>,
}

impl HeldServer {
    async fn before(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (release, released) = watch::channel(false);
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut held, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let mut released = released.clone();
                tokio::spawn(async move {
                    let _ = released.wait_for(|open| *open).await;
                    let mut upstream = TcpStream::connect(("127.0.0.1", target)).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut held, &mut upstream).await;
                });
            }
        });
        Self {
            port,
            accepted,
            release,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn servers_that_answer_late_are_waited_for_together_and_serve_the_next_turn(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_B, "echo", ECHO, text_schema()).await;
    app.model.script("late", vec![Reply::text("answered")]);
    let target: u16 = app.base().rsplit(':').next().unwrap().parse().unwrap();
    let held = HeldServer::before(target).await;
    let mut config = app.agent_config("late", json!({}));
    for n in 1..=3 {
        config["mcpServers"][format!("slow{n}")] = json!({
            "url": format!("http://127.0.0.1:{}/mcp", held.port),
            "headers": {"x-replica": n.to_string()},
            "auth": {"type": "bearer", "token": token(ACCOUNT_B)},
            "tools": ["echo"],
        });
    }
    let body = json!({"name": "late", "config": config});
    // Listed one after another, each to the tool deadline (25 s), the save
    // would take over a minute; together, each waited for a few seconds.
    let (status, created) = tokio::time::timeout(
        Duration::from_secs(20),
        app.request(
            reqwest::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(body.clone()),
        ),
    )
    .await
    .expect("a save waits for its servers together, and briefly");
    assert_eq!(status, 201, "{created}");
    let warnings = created["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 3, "{created}");
    assert!(
        warnings
            .iter()
            .all(|w| w.as_str().unwrap().contains("no tool list within")),
        "{created}"
    );
    assert_eq!(held.accepted(), 3);
    let agent = created["agentId"].as_str().unwrap().to_owned();

    let turn = app.say(ACCOUNT_A, &agent, "conv-late", "hello").await;
    assert_eq!(turn.text(), "answered", "{}", turn.body);
    let first = &app.model.requests("late")[0];
    assert!(
        first
            .get("tools")
            .is_none_or(|tools| tools.as_array().is_none_or(Vec::is_empty)),
        "{first}"
    );
    assert_eq!(
        held.accepted(),
        3,
        "a listing still running is waited on, not started again"
    );

    held.release.send_replace(true);
    until("the released listings to settle and be kept", || async {
        let (status, again) = app
            .request(
                reqwest::Method::POST,
                "/agents",
                ACCOUNT_A,
                Some(body.clone()),
            )
            .await;
        assert_eq!(status, 201, "{again}");
        again.get("warnings").is_none()
    })
    .await;
    let settled = held.accepted();
    let turn = app.say(ACCOUNT_A, &agent, "conv-later", "again").await;
    assert_eq!(turn.text(), "answered", "{}", turn.body);
    assert_eq!(held.accepted(), settled, "the kept lists serve the turn");
    let mut offered: Vec<String> = app.model.requests("late")[1]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    offered.sort();
    assert_eq!(offered, ["slow1__echo", "slow2__echo", "slow3__echo"]);
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
    let both_refused = json!({"name": "mcp", "config": {
        "model": {"provider": "openai", "modelId": "m"},
        "provider": {"openai": {"baseUrl": "http://10.9.8.7/v1"}},
        "mcpServers": {"docs": {"url": "http://127.0.0.1:8080/mcp"}},
    }});
    let reply = app
        .call(
            axum::http::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(both_refused),
        )
        .await;
    assert_eq!(reply.status, 422, "{}", reply.json());
    assert_eq!(
        reply.json()["error"]["field"],
        "config.provider.openai.baseUrl",
        "endpoints are checked together; the first refused in the config's order is named"
    );
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
