//! The agents API: create, read, list, update, delete; credentials sealed at
//! rest and never returned; every route scoped to the caller's account.

use serde_json::{json, Value};
use sqlx::PgPool;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

async fn create(app: &TestApp, account: &str, name: &str, config: Value) -> (u16, Value) {
    app.request(
        reqwest::Method::POST,
        "/agents",
        account,
        Some(json!({"name": name, "config": config})),
    )
    .await
}

#[sqlx::test(migrations = "../../migrations")]
async fn credentials_are_sealed_and_never_returned(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let mut config = app.agent_config(
        "m",
        json!({"tavilySearch": {"apiKey": "tvly-plaintext-key", "maxResults": 3}}),
    );
    config["provider"]["openai"]["apiKey"] = json!("sk-plaintext-key");
    let (status, created) = create(&app, ACCOUNT_A, "keys", config).await;
    assert_eq!(status, 201, "{created}");
    let id = created["agentId"].as_str().unwrap().to_owned();
    for view in [
        created.clone(),
        app.request(
            reqwest::Method::GET,
            &format!("/agents/{id}"),
            ACCOUNT_A,
            None,
        )
        .await
        .1,
    ] {
        assert_eq!(view["config"]["provider"]["openai"]["apiKey"], "[redacted]");
        assert_eq!(
            view["config"]["tools"]["tavilySearch"]["apiKey"],
            "[redacted]"
        );
        assert_eq!(view["config"]["tools"]["tavilySearch"]["maxResults"], 3);
        assert!(!view.to_string().contains("plaintext"), "{view}");
    }
    let (_, listed) = app
        .request(reqwest::Method::GET, "/agents", ACCOUNT_A, None)
        .await;
    assert!(!listed.to_string().contains("plaintext"));

    let (stored_config, sealed): (Value, Vec<u8>) =
        sqlx::query_as("SELECT config, secrets FROM agents")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert!(!stored_config.to_string().contains("plaintext"));
    assert!(
        !sealed.windows(9).any(|w| w == b"plaintext"),
        "the sealed blob holds the plaintext"
    );
    assert!(sealed.len() > 40);

    // "[redacted]" sent back keeps the stored key; the agent still runs with it.
    let mut renamed = created["config"].clone();
    renamed["systemPrompt"] = json!("Changed.");
    let (status, updated) = app
        .request(
            reqwest::Method::PATCH,
            &format!("/agents/{id}"),
            ACCOUNT_A,
            Some(json!({"config": renamed})),
        )
        .await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["version"], 2);
    app.model
        .script("m", vec![toolserver_testsupport::Reply::text("ok")]);
    let turn = app.say(ACCOUNT_A, &id, "conv-keys", "hi").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let (after, _): (Value, Vec<u8>) = sqlx::query_as("SELECT config, secrets FROM agents")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(after["systemPrompt"], "Changed.");

    // A redacted mark where no key is stored is refused.
    let mut bogus = created["config"].clone();
    bogus["tools"]["tavilyExtract"] = json!({"apiKey": "[redacted]"});
    let (status, body) = app
        .request(
            reqwest::Method::PATCH,
            &format!("/agents/{id}"),
            ACCOUNT_A,
            Some(json!({"config": bogus})),
        )
        .await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some("config.tools.tavilyExtract.apiKey")),
        "{body}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn agents_are_scoped_to_their_account(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let (_, created) = create(&app, ACCOUNT_A, "mine", app.agent_config("m", json!({}))).await;
    let path = format!("/agents/{}", created["agentId"].as_str().unwrap());
    for (method, body) in [
        (reqwest::Method::GET, None),
        (reqwest::Method::PATCH, Some(json!({"name": "stolen"}))),
        (reqwest::Method::DELETE, None),
    ] {
        let (status, reply) = app.request(method.clone(), &path, ACCOUNT_B, body).await;
        assert_eq!(
            (status, reply["error"]["code"].as_str()),
            (404, Some("not_found")),
            "{method} {reply}"
        );
    }
    let (_, listed) = app
        .request(reqwest::Method::GET, "/agents", ACCOUNT_B, None)
        .await;
    assert_eq!(listed["agents"], json!([]));
    let (status, _) = app
        .request(reqwest::Method::GET, &path, ACCOUNT_A, None)
        .await;
    assert_eq!(status, 200);
    let (status, _) = app
        .request(reqwest::Method::DELETE, &path, ACCOUNT_A, None)
        .await;
    assert_eq!(status, 204);
    let (status, _) = app
        .request(reqwest::Method::GET, &path, ACCOUNT_A, None)
        .await;
    assert_eq!(status, 404);
}

#[sqlx::test(migrations = "../../migrations")]
async fn bad_agent_bodies_are_4xx_naming_the_field(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let good = app.agent_config("m", json!({}));
    for (body, status, field) in [
        (json!({"name": "", "config": good}), 422, "name"),
        (json!({"name": "x"}), 400, ""),
        (json!({"name": "x", "config": good, "extra": 1}), 400, ""),
        (
            json!({"name": "x", "config": {"model": {"provider": "openai", "modelId": "m"}, "maxSteps": 0}}),
            422,
            "config.maxSteps",
        ),
        (
            json!({"name": "x", "config": {"model": {"provider": "openai", "modelId": "m", "options": {"topK": 3}}}}),
            422,
            "config.model.options.topK",
        ),
        (
            json!({"name": "x", "config": {"model": {"provider": "openai", "modelId": "m"}, "tools": {"tavilySearch": {}}}}),
            422,
            "config.tools.tavilySearch.apiKey",
        ),
    ] {
        let (got, reply) = app
            .request(
                reqwest::Method::POST,
                "/agents",
                ACCOUNT_A,
                Some(body.clone()),
            )
            .await;
        assert_eq!(got, status, "{body} -> {reply}");
        if !field.is_empty() {
            assert_eq!(reply["error"]["field"], field, "{reply}");
        }
    }
    let (_, listed) = app
        .request(reqwest::Method::GET, "/agents", ACCOUNT_A, None)
        .await;
    assert_eq!(listed["agents"], json!([]));
    let (status, _) = app
        .request(reqwest::Method::GET, "/agents/agent_nope", ACCOUNT_A, None)
        .await;
    assert_eq!(status, 404);
}
