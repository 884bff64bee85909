//! An MCP server an agent names that acts through each end user's own
//! connection: a real MCP server (rmcp) that accepts only the
//! authorization server's tokens. Until a user connects, the model is
//! offered the server's connect tool; its call asks the user to authorize,
//! and once they have, the server's tools are listed and called with that
//! user's token.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::protected_mcp::ProtectedMcpServer;
use toolserver_testsupport::Reply;

use super::{answered, asks_to_authorize, authorize, connected_app, output_of};
use crate::app::TestApp;
use crate::support::*;

const MODEL: &str = "oauth-mcp";

/// The names of the tools the model was offered in its `index`th request.
fn offered(app: &TestApp, index: usize) -> Vec<String> {
    let requests = app.model.requests(MODEL);
    let mut names: Vec<String> = requests[index]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// An agent config naming `mcp` as `crm`, acting through `provider`.
fn config(app: &TestApp, mcp: &ProtectedMcpServer, provider: &str) -> Value {
    let mut config = app.agent_config(MODEL, json!({}));
    config["mcpServers"] = json!({"crm": {
        "url": mcp.url(),
        "auth": {"type": "connection", "provider": provider},
    }});
    config
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_mcp_server_acts_as_each_end_user_through_their_connection(pool: PgPool) {
    let (oauth, app, _) = connected_app(pool, 3600, Duration::from_secs(1)).await;
    let mcp = ProtectedMcpServer::start(&oauth.resource_url()).await;

    let (status, refused) = app
        .request(
            Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(json!({"name": "nope", "config": config(&app, &mcp, "nope")})),
        )
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(
        refused["error"]["field"], "config.mcpServers.crm.auth.provider",
        "{refused}"
    );

    app.model.script(
        MODEL,
        vec![
            Reply::tool_call("c_connect", "crm__connect", json!({})),
            Reply::tool_call("c_who", "crm__whoami", json!({})),
            Reply::text("Done."),
        ],
    );
    let created = app
        .agent_with_config(ACCOUNT_A, MODEL, config(&app, &mcp, "demo"))
        .await;
    let agent = created["agentId"].as_str().unwrap().to_owned();

    let url = asks_to_authorize(&app, &agent, "ann", "conv-mcp-ann").await;
    assert_eq!(offered(&app, 0), ["crm__connect"], "not connected yet");
    authorize(&app, &oauth, &url, "ann").await;
    let stored = answered(&app, "conv-mcp-ann").await;
    assert_eq!(
        output_of(&stored, "crm__connect"),
        json!({"connected": "demo", "tools": ["crm__whoami"]}),
        "{stored}"
    );
    assert_eq!(output_of(&stored, "crm__whoami")["user"], "ann", "{stored}");
    assert_eq!(offered(&app, 1), ["crm__whoami"], "connected");

    let url = asks_to_authorize(&app, &agent, "bob", "conv-mcp-bob").await;
    assert_eq!(offered(&app, 3), ["crm__connect"], "bob has his own prompt");
    authorize(&app, &oauth, &url, "bob").await;
    let stored = answered(&app, "conv-mcp-bob").await;
    assert_eq!(output_of(&stored, "crm__whoami")["user"], "bob", "{stored}");

    let again = app
        .turn_as(
            &user_token("ann"),
            &agent,
            user_turn("conv-mcp-ann-2", "and now?"),
        )
        .await;
    assert!(
        again.of_type("data-authorization").is_empty(),
        "{}",
        again.body
    );
    assert_eq!(offered(&app, 6), ["crm__whoami"], "ann is connected");
    let outputs = again.of_type("tool-output-available");
    let who = outputs.iter().find(|o| o["toolCallId"] == "c_who").unwrap();
    assert_eq!(who["output"]["user"], "ann", "{}", again.body);

    assert_eq!(mcp.calls(), ["ann", "bob", "ann"]);
    assert_eq!(mcp.refused(), 0, "every request carried a user's token");
    let issued = oauth.issued_tokens().await;
    let accepted = mcp.accepted_tokens();
    assert!(accepted.len() >= 2, "{accepted:?}");
    assert!(
        accepted.iter().all(|token| issued.contains(token)),
        "the server saw only tokens the provider issued"
    );
}
