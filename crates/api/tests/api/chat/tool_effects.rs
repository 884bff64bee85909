//! An agent config's `effects`: it may declare a tool more cautious than
//! the tool does, never less, and the deprecated `safeToRepeat: true` is
//! taken only where the tool's effects already allow repeats. Refused
//! configs are not saved; a stored one from before loads.

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

use super::{q_schema, ECHO};

/// Creates an agent of account A with `tools`; the status and the answer.
async fn save(app: &TestApp, tools: Value) -> (u16, Value) {
    let config = app.agent_config("m", tools);
    app.request(
        reqwest::Method::POST,
        "/agents",
        ACCOUNT_A,
        Some(json!({"name": "x", "config": config})),
    )
    .await
}

/// Uploads the echo tool as `name` declaring `effects`; its id.
async fn tool(app: &TestApp, name: &str, effects: Option<&str>) -> String {
    let fields = match effects {
        Some(effects) => json!({ "effects": effects }),
        None => json!({}),
    };
    app.upload_declaring(ACCOUNT_A, (name, ECHO), q_schema(), fields)
        .await
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_agent_may_narrow_a_tools_effects_but_never_widen_them(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let read = tool(&app, "reads", Some("read")).await;
    let idempotent = tool(&app, "sets", Some("idempotent")).await;
    let writes = tool(&app, "writes", None).await;
    let tavily = |setting: Value| {
        let mut setting = setting;
        setting["apiKey"] = json!("tvly-test");
        json!({ "tavilySearch": setting })
    };
    let accepted = [
        json!({ &read: {"effects": "read"} }),
        json!({ &read: {"effects": "idempotent"} }),
        json!({ &read: {"effects": "side_effect"} }),
        json!({ &idempotent: {"effects": "side_effect"} }),
        json!({ &writes: {"effects": "side_effect"} }),
        json!({ &writes: {"safeToRepeat": false} }),
        json!({ &idempotent: {"async": true, "safeToRepeat": true} }),
        tavily(json!({"effects": "side_effect"})),
        json!({"handoff": {"effects": "side_effect"}}),
    ];
    for tools in &accepted {
        let (status, body) = save(&app, tools.clone()).await;
        assert_eq!(status, 201, "{tools}: {body}");
    }
    let field = |key: &str, name: &str| format!("config.tools.{key}.{name}");
    let refused = [
        (
            json!({ &writes: {"effects": "read"} }),
            field(&writes, "effects"),
        ),
        (
            json!({ &writes: {"effects": "idempotent"} }),
            field(&writes, "effects"),
        ),
        (
            json!({ &idempotent: {"effects": "read"} }),
            field(&idempotent, "effects"),
        ),
        (
            json!({"handoff": {"effects": "idempotent"}}),
            field("handoff", "effects"),
        ),
        (
            json!({"handoff": {"enabled": false, "effects": "read"}}),
            field("handoff", "effects"),
        ),
        (
            json!({ &writes: {"async": true, "safeToRepeat": true} }),
            field(&writes, "safeToRepeat"),
        ),
        (
            json!({ &read: {"effects": "read", "safeToRepeat": false} }),
            field(&read, "safeToRepeat"),
        ),
    ];
    for (tools, field) in &refused {
        let (status, body) = save(&app, tools.clone()).await;
        assert_eq!(
            (status, body["error"]["field"].as_str()),
            (422, Some(field.as_str())),
            "{tools}: {body}"
        );
    }
    let (_, claimed) = save(
        &app,
        json!({ &writes: {"async": true, "safeToRepeat": true} }),
    )
    .await;
    let message = claimed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("side_effect") && message.contains("effects"),
        "the refusal points at the tool's effects: {message}"
    );
    let (_, listed) = app
        .request(reqwest::Method::GET, "/agents", ACCOUNT_A, None)
        .await;
    assert_eq!(
        listed["agents"].as_array().unwrap().len(),
        accepted.len(),
        "nothing refused was saved"
    );

    // A patch that would widen is refused too, and leaves the agent as it was.
    let agent = app.agent(ACCOUNT_A, "m", json!({ &read: {} })).await;
    let path = format!("/agents/{agent}");
    let mut config = app.agent_config("m", json!({ &writes: {"effects": "read"} }));
    let (status, body) = app
        .request(
            reqwest::Method::PATCH,
            &path,
            ACCOUNT_A,
            Some(json!({ "config": config })),
        )
        .await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some(field(&writes, "effects").as_str()))
    );
    config["tools"] = json!({ &writes: {"effects": "side_effect"} });
    let (status, body) = app
        .request(
            reqwest::Method::PATCH,
            &path,
            ACCOUNT_A,
            Some(json!({ "config": config })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_stored_config_whose_claims_no_longer_hold_still_runs_its_turns(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let read = tool(&app, "reads", Some("read")).await;
    let writes = tool(&app, "writes", None).await;
    app.model.script(
        "stored",
        vec![
            Reply::tool_call("c1", "reads", json!({"q": "a"})),
            Reply::text("Read it."),
        ],
    );
    let agent = app
        .agent(
            ACCOUNT_A,
            "stored",
            json!({ &read: {"effects": "read"}, &writes: {"async": true} }),
        )
        .await;
    // Stored before effects existed (`safeToRepeat: true` on a side-effect
    // tool) and before the read tool became a writer.
    sqlx::query(
        "UPDATE agents SET config = jsonb_set(config, ARRAY['tools', $1, 'safeToRepeat'], 'true')",
    )
    .bind(&writes)
    .execute(&pool)
    .await
    .unwrap();
    let (status, _) = app
        .request(
            reqwest::Method::PATCH,
            &format!("/accounts/me/tools/{read}"),
            ACCOUNT_A,
            Some(json!({"effects": "side_effect"})),
        )
        .await;
    assert_eq!(status, 200);

    let turn = app.say(ACCOUNT_A, &agent, "conv-stored", "read").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let outputs = turn.of_type("tool-output-available");
    assert_eq!(outputs.len(), 1, "{}", turn.body);
    assert_eq!(outputs[0]["output"]["echo"], json!({"q": "a"}));
    let (status, stored) = app
        .request(
            reqwest::Method::GET,
            &format!("/agents/{agent}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        stored["config"]["tools"][&writes]["safeToRepeat"], true,
        "nothing stored is lost"
    );
}
