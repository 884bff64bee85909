//! An agent's tool config: unknown tools refused when the agent is saved
//! and when a turn runs, and `async` on a provider-defined tool a warning.

use serde_json::json;
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::spawn_live_app;
use crate::support::*;

use super::{q_schema, ECHO};

#[sqlx::test(migrations = "../../migrations")]
async fn unknown_tools_are_refused_at_save_and_at_run(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let foreign = app.upload(ACCOUNT_B, "echo", ECHO, q_schema()).await;
    for (tools, field) in [
        (json!({"bash": {}}), "config.tools.bash"),
        (json!({ &foreign: {} }), &*format!("config.tools.{foreign}")),
        (json!({"async_status": {}}), "config.tools.async_status"),
        (json!({"googleSearch": {}}), "config.tools.googleSearch"),
    ] {
        let (status, body) = app
            .request(
                reqwest::Method::POST,
                "/agents",
                ACCOUNT_A,
                Some(json!({"name": "x", "config": app.agent_config("m", tools)})),
            )
            .await;
        assert_eq!(
            (status, body["error"]["field"].as_str()),
            (422, Some(field)),
            "{body}"
        );
    }
    let (_, listed) = app
        .request(reqwest::Method::GET, "/agents", ACCOUNT_A, None)
        .await;
    assert_eq!(listed["agents"], json!([]));

    // Saved while the tool existed; the tool is deleted; the next turn is refused.
    let tool = app.upload(ACCOUNT_A, "echo", ECHO, q_schema()).await;
    app.model.script("gone", vec![Reply::text("unused")]);
    let agent = app.agent(ACCOUNT_A, "gone", json!({ &tool: {} })).await;
    let (status, _) = app
        .request(
            reqwest::Method::DELETE,
            &format!("/accounts/me/tools/{tool}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 204);
    let turn = app.say(ACCOUNT_A, &agent, "conv-gone", "hi").await;
    assert_eq!(turn.status, 422, "{}", turn.body);
    assert_eq!(
        turn.json()["error"]["field"],
        format!("config.tools.{tool}")
    );
    assert_eq!(app.model.request_count("gone"), 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn async_on_a_provider_defined_tool_is_a_warning(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let (status, body) = app
        .request(
            reqwest::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(json!({"name": "x", "config": app.agent_config("m", json!({"googleSearch": {"enabled": false, "async": true}}))})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert!(
        body["warnings"][0]
            .as_str()
            .unwrap()
            .contains("googleSearch"),
        "{body}"
    );
}
