//! Per-user OAuth connections end to end, against a real OAuth 2.1
//! authorization server (authlib, `clients/oauth-server`): a turn whose
//! call needs a connection asks its end user to authorize, the test
//! follows the URL and the redirect as a browser would, and the call runs
//! with that user's own token; another end user gets their own prompt;
//! tokens are refreshed before they lapse; a revoked refresh token fails
//! the connection, which is announced and asked for again. MCP servers an
//! agent names may act through the same connections (`remote_mcp`).

mod remote_mcp;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_harness::lifecycle::LifecycleSettings;
use toolserver_harness::webhooks::WebhookSettings;
use toolserver_harness::HarnessSettings;
use toolserver_testsupport::oauth_server::OAuthServer;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::Reply;

use crate::app::{fast_lifecycle, TestApp};
use crate::support::*;
use crate::webhook_receiver::Receiver;

/// The OAuth client the tests' provider `demo` is configured as.
pub(crate) const CLIENT_ID: &str = "toolserver-test";
/// Its secret.
pub(crate) const CLIENT_SECRET: &str = "client-s3cret-value";

/// Settings refreshing tokens that lapse within `refresh_ahead`, with
/// quick resumption and webhooks.
fn settings(refresh_ahead: Duration) -> HarnessSettings {
    let fast = fast_lifecycle();
    HarnessSettings {
        lifecycle: LifecycleSettings {
            approval_resume_grace: Duration::from_millis(300),
            connection_refresh_ahead: refresh_ahead,
            ..fast.lifecycle
        },
        webhooks: WebhookSettings {
            first_retry: Duration::from_millis(50),
            max_retry: Duration::from_millis(200),
            poll: Duration::from_millis(20),
            ..WebhookSettings::DEFAULT
        },
        ..fast
    }
}

/// Configures the provider `demo` at `oauth` (for the client [`CLIENT_ID`]),
/// announcing to `webhook` when given.
pub(crate) async fn configure(app: &TestApp, oauth: &OAuthServer, webhook: Option<&str>) {
    let mut provider = json!({
        "authorizationUrl": oauth.authorization_url(),
        "tokenUrl": oauth.token_url(),
        "clientId": CLIENT_ID,
        "clientSecret": CLIENT_SECRET,
        "scopes": ["profile"],
    });
    if let Some(webhook) = webhook {
        provider["webhook"] = json!(webhook);
    }
    let (status, body) = app
        .request(
            Method::PUT,
            "/accounts/me/oauth-providers/demo",
            ACCOUNT_A,
            Some(provider),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["hasClientSecret"], true);
    assert!(!body.to_string().contains(CLIENT_SECRET), "{body}");
}

/// An authorization server issuing tokens that live `access_ttl_secs`,
/// and an app refreshing them `refresh_ahead` before they lapse, with the
/// provider `demo` configured to announce on the returned receiver.
async fn connected_app(
    pool: PgPool,
    access_ttl_secs: u64,
    refresh_ahead: Duration,
) -> (OAuthServer, TestApp, Receiver) {
    let oauth = OAuthServer::start(CLIENT_ID, CLIENT_SECRET, access_ttl_secs).await;
    let app = TestApp::live(pool)
        .harness(settings(refresh_ahead))
        .spawn()
        .await;
    let (receiver, webhook) = Receiver::start().await;
    configure(&app, &oauth, Some(&webhook)).await;
    (oauth, app, receiver)
}

/// An HTTP tool calling the provider's API as the end user; its id.
pub(crate) async fn whoami_tool(app: &TestApp, oauth: &OAuthServer) -> String {
    let (status, body) = app
        .request(
            Method::POST,
            "/accounts/me/tools",
            ACCOUNT_A,
            Some(json!({
                "name": "whoami",
                "description": "Who the end user is at the provider.",
                "inputSchema": {"type": "object"},
                "kind": "http",
                "http": {
                    "method": "GET",
                    "url": oauth.resource_url(),
                    "headers": {"Authorization": "Bearer {{connection.demo.access_token}}"},
                },
            })),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body["toolId"].as_str().unwrap().to_owned()
}

/// `user`'s turn in `conversation`, which must stop on an authorization;
/// the authorization URL.
async fn asks_to_authorize(app: &TestApp, agent: &str, user: &str, conversation: &str) -> String {
    let turn = app
        .turn_as(
            &user_token(user),
            agent,
            user_turn(conversation, "who am I?"),
        )
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let asked = turn.of_type("data-authorization");
    assert_eq!(asked.len(), 1, "{}", turn.body);
    assert!(
        turn.of_type("tool-output-available").is_empty(),
        "{}",
        turn.body
    );
    assert_eq!(asked[0]["data"]["provider"], "demo");
    asked[0]["data"]["url"].as_str().unwrap().to_owned()
}

/// Follows `url` as `user` would in a browser: the provider's consent,
/// then its redirect to this server; the redirect's answer.
async fn authorize(app: &TestApp, oauth: &OAuthServer, url: &str, user: &str) -> Value {
    let callback = oauth.consent(url, user).await;
    assert!(callback.starts_with(app.base()), "{callback}");
    let response = app.client.get(&callback).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["connected"], true, "{answer}");
    answer
}

/// Conversation `id` once its assistant message answered after the call.
async fn answered(app: &TestApp, id: &str) -> Value {
    let path = format!("/conversations/{id}");
    until("the resumed turn to answer", || async {
        let (_, stored) = app.request(Method::GET, &path, ACCOUNT_A, None).await;
        stored.to_string().contains("Done.")
    })
    .await;
    app.request(Method::GET, &path, ACCOUNT_A, None).await.1
}

/// The output of the call of `whoami` in a stored conversation.
fn whoami_output(stored: &Value) -> Value {
    output_of(stored, "whoami")
}

/// The output of the call of `tool` in a stored conversation.
fn output_of(stored: &Value, tool: &str) -> Value {
    stored["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|message| message["parts"].as_array().cloned().unwrap_or_default())
        .find(|part| part["type"] == format!("tool-{tool}"))
        .map(|part| part["output"].clone())
        .unwrap_or(Value::Null)
}

#[sqlx::test(migrations = "../../migrations")]
async fn each_end_user_authorizes_once_and_calls_run_with_their_own_token(pool: PgPool) {
    let (oauth, app, _) = connected_app(pool, 3600, Duration::from_secs(1)).await;
    let tool = whoami_tool(&app, &oauth).await;
    app.model.script(
        "oauth-users",
        vec![
            Reply::tool_call("c_ann", "whoami", json!({})),
            Reply::text("Done."),
            Reply::tool_call("c_bob", "whoami", json!({})),
            Reply::text("Done."),
            Reply::tool_call("c_ann2", "whoami", json!({})),
            Reply::text("Done again."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "oauth-users", json!({ &tool: {} }))
        .await;

    let url = asks_to_authorize(&app, &agent, "ann", "conv-ann").await;
    let redirect = url::Url::parse(&url).unwrap();
    let query: Vec<(String, String)> = redirect.query_pairs().into_owned().collect();
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(param("code_challenge_method").as_deref(), Some("S256"));
    assert_eq!(param("client_id").as_deref(), Some(CLIENT_ID));
    assert_eq!(param("scope").as_deref(), Some("profile"));
    let answer = authorize(&app, &oauth, &url, "ann").await;
    assert_eq!(answer["user"], "ann");
    assert!(answer["resumedTurn"].is_string(), "{answer}");
    let stored = answered(&app, "conv-ann").await;
    assert_eq!(whoami_output(&stored)["user"], "ann", "{stored}");

    let url = asks_to_authorize(&app, &agent, "bob", "conv-bob").await;
    let answer = authorize(&app, &oauth, &url, "bob").await;
    assert_eq!(answer["user"], "bob");
    let stored = answered(&app, "conv-bob").await;
    assert_eq!(whoami_output(&stored)["user"], "bob", "{stored}");

    let again = app
        .turn_as(
            &user_token("ann"),
            &agent,
            user_turn("conv-ann-2", "and now?"),
        )
        .await;
    assert!(
        again.of_type("data-authorization").is_empty(),
        "{}",
        again.body
    );
    let outputs = again.of_type("tool-output-available");
    assert_eq!(outputs[0]["output"]["user"], "ann", "{}", again.body);

    let used = authorize_again(&app, &oauth, &url).await;
    assert_eq!(used, 404, "a used state is refused");

    let (status, listed) = app
        .request(Method::GET, "/accounts/me/connections", ACCOUNT_A, None)
        .await;
    assert_eq!(status, 200);
    let users: Vec<&str> = listed["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["user"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["ann", "bob"], "{listed}");
    assert!(listed["connections"][0].get("accessToken").is_none());
    let status = app
        .client
        .get(format!("{}/accounts/me/connections?user=bob", app.base()))
        .bearer_auth(user_token("ann"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 403, "ann may not list bob's connections");
    let (_, other) = app
        .request(Method::GET, "/accounts/me/connections", ACCOUNT_B, None)
        .await;
    assert_eq!(other["connections"], json!([]), "another account sees none");
    let (status, _) = app
        .request(
            Method::DELETE,
            "/accounts/me/oauth-providers/demo",
            ACCOUNT_B,
            None,
        )
        .await;
    assert_eq!(status, 404, "another account's provider is not found");

    let tokens = oauth.issued_tokens().await;
    assert!(tokens.len() >= 3, "{tokens:?}");
    let (_, ledger) = app
        .request(Method::GET, "/tool-calls?limit=100", ACCOUNT_A, None)
        .await;
    let mut seen = vec![listed.to_string(), ledger.to_string(), again.body.clone()];
    for id in ["conv-ann", "conv-bob", "conv-ann-2"] {
        let path = format!("/conversations/{id}");
        seen.push(
            app.request(Method::GET, &path, ACCOUNT_A, None)
                .await
                .1
                .to_string(),
        );
    }
    for token in &tokens {
        assert!(
            seen.iter().all(|answer| !answer.contains(token.as_str())),
            "an issued token appears in an API answer"
        );
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_approved_call_then_asks_for_the_connection_and_runs_after_the_redirect(pool: PgPool) {
    let (oauth, app, _) = connected_app(pool, 3600, Duration::from_secs(1)).await;
    let tool = whoami_tool(&app, &oauth).await;
    app.model.script(
        "oauth-approved",
        vec![
            Reply::tool_call("c_dee", "whoami", json!({})),
            Reply::text("Done."),
        ],
    );
    let agent = app
        .agent(
            ACCOUNT_A,
            "oauth-approved",
            json!({ &tool: {"needsApproval": true} }),
        )
        .await;
    let turn = app
        .turn_as(
            &user_token("dee"),
            &agent,
            user_turn("conv-dee", "who am I?"),
        )
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert!(
        turn.of_type("data-authorization").is_empty(),
        "the approval comes first: {}",
        turn.body
    );
    let approval = turn.of_type("tool-approval-request")[0]["approvalId"]
        .as_str()
        .unwrap()
        .to_owned();
    let decided = app
        .client
        .post(format!("{}/approvals/{approval}", app.base()))
        .bearer_auth(token(ACCOUNT_A))
        .json(&json!({"approved": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 200);

    let path = "/conversations/conv-dee";
    let asked = until("the approved call to ask for the connection", || async {
        let (_, stored) = app.request(Method::GET, path, ACCOUNT_A, None).await;
        stored.to_string().contains("data-authorization")
    });
    asked.await;
    let (_, stored) = app.request(Method::GET, path, ACCOUNT_A, None).await;
    let parts = stored["messages"][1]["parts"].as_array().unwrap().clone();
    let call = parts.iter().find(|p| p["toolCallId"] == "c_dee").unwrap();
    assert_eq!(call["state"], "input-available", "it waits: {stored}");
    let url = parts
        .iter()
        .find(|p| p["type"] == "data-authorization")
        .map(|p| p["data"]["url"].as_str().unwrap().to_owned())
        .unwrap();
    authorize(&app, &oauth, &url, "dee").await;
    let stored = answered(&app, "conv-dee").await;
    assert_eq!(whoami_output(&stored)["user"], "dee", "{stored}");
    assert_eq!(app.model.requests("oauth-approved").len(), 2, "{stored}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn one_redirect_settles_every_call_that_asked_for_the_same_connection(pool: PgPool) {
    let (oauth, app, _) = connected_app(pool, 3600, Duration::from_secs(1)).await;
    let tool = whoami_tool(&app, &oauth).await;
    app.model.script(
        "oauth-twice",
        vec![
            Reply::tool_call("c_one", "whoami", json!({})).and_tool_call(
                "c_two",
                "whoami",
                json!({}),
            ),
            Reply::text("Done."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "oauth-twice", json!({ &tool: {} }))
        .await;
    let turn = app
        .turn_as(&user_token("eve"), &agent, user_turn("conv-eve", "twice"))
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let asked = turn.of_type("data-authorization");
    assert_eq!(asked.len(), 2, "{}", turn.body);
    let url = asked[0]["data"]["url"].as_str().unwrap().to_owned();
    let callback = oauth.consent(&url, "eve").await;
    let page = app
        .client
        .get(&callback)
        .header("accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(html.contains("<h1>Connected to demo</h1>"), "{html}");
    let used = app
        .client
        .get(&callback)
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(used.status(), 404, "a used state is refused, as a page");
    assert!(used
        .text()
        .await
        .unwrap()
        .contains("The connection was not made"));
    let stored = answered(&app, "conv-eve").await;
    let outputs: Vec<Value> = stored["messages"][1]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|part| part["type"] == "tool-whoami")
        .map(|part| part["output"]["user"].clone())
        .collect();
    assert_eq!(outputs, [json!("eve"), json!("eve")], "{stored}");
    assert_eq!(app.model.requests("oauth-twice").len(), 2, "{stored}");
}

/// Follows the consent at `url` again as ann; the redirect's status.
async fn authorize_again(app: &TestApp, oauth: &OAuthServer, url: &str) -> u16 {
    let callback = oauth.consent(url, "ann").await;
    app.client
        .get(&callback)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// An uploaded tool whose code calls the provider's API through
/// `ctx.fetch`, the token filled in by the server.
fn fetching_tool(resource: &str) -> String {
    format!(
        "export default {{ async execute(ctx) {{
            const answer = await ctx.fetch({resource:?}, {{
                headers: {{ Authorization: 'Bearer {{{{connection.demo.access_token}}}}' }},
            }});
            return {{ status: answer.status, me: await answer.json() }};
        }} }};"
    )
}

#[sqlx::test(migrations = "../../migrations")]
async fn uploaded_code_acts_for_the_end_user_through_ctx_fetch(pool: PgPool) {
    let (oauth, app, _) = connected_app(pool, 3600, Duration::from_secs(1)).await;
    let source = fetching_tool(&oauth.resource_url());
    let schema = json!({"type": "object"});
    let undeclared = app
        .upload(ACCOUNT_A, "undeclared", &source, schema.clone())
        .await;
    let (status, refused) = app
        .invoke(ACCOUNT_A, &undeclared, json!({"input": {}}))
        .await;
    assert_eq!(status, 200, "{refused}");
    assert!(
        refused
            .to_string()
            .contains("does not declare the connection demo"),
        "{refused}"
    );
    let tool = app
        .upload_declaring(
            ACCOUNT_A,
            ("profile", &source),
            schema,
            json!({"connection": "demo"}),
        )
        .await;
    app.model.script(
        "oauth-fetch",
        vec![
            Reply::tool_call("c_cy", "profile", json!({})),
            Reply::text("Done."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "oauth-fetch", json!({ &tool: {} }))
        .await;
    let url = asks_to_authorize(&app, &agent, "cy", "conv-cy").await;
    authorize(&app, &oauth, &url, "cy").await;
    let stored = answered(&app, "conv-cy").await;
    let output = output_of(&stored, "profile");
    assert_eq!(output["status"], 200, "{stored}");
    assert_eq!(output["me"]["user"], "cy", "{stored}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn tokens_refresh_before_they_lapse_and_a_revoked_grant_is_announced(pool: PgPool) {
    let (oauth, app, receiver) = connected_app(pool, 3, Duration::from_secs(2)).await;
    let tool = whoami_tool(&app, &oauth).await;
    app.model.script(
        "oauth-refresh",
        vec![
            Reply::tool_call("c1", "whoami", json!({})),
            Reply::text("Done."),
            Reply::tool_call("c2", "whoami", json!({})),
            Reply::text("Asked again."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "oauth-refresh", json!({ &tool: {} }))
        .await;
    let url = asks_to_authorize(&app, &agent, "ann", "conv-refresh").await;
    authorize(&app, &oauth, &url, "ann").await;
    answered(&app, "conv-refresh").await;

    until(
        "the reaper to refresh the token before it lapses",
        || async { oauth.stats().await["refresh_token"].as_u64().unwrap_or(0) >= 2 },
    )
    .await;
    let (_, listed) = app
        .request(Method::GET, "/accounts/me/connections", ACCOUNT_A, None)
        .await;
    let connection = &listed["connections"][0];
    assert_eq!(connection["status"], "active", "{listed}");
    assert!(connection["refreshedAt"].is_string(), "{listed}");

    assert!(oauth.revoke("ann").await >= 1);
    let posts = receiver.posts(1).await;
    assert_eq!(posts[0]["type"], "connection.refresh_failed", "{posts:?}");
    assert_eq!(posts[0]["connection"]["provider"], "demo");
    assert_eq!(posts[0]["connection"]["user"], "ann");
    assert!(
        posts[0]["connection"]["error"]
            .as_str()
            .unwrap()
            .contains("invalid_grant"),
        "{posts:?}"
    );
    let (_, listed) = app
        .request(
            Method::GET,
            "/accounts/me/connections?user=ann",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(listed["connections"][0]["status"], "failed", "{listed}");
    assert!(listed["connections"][0]["lastError"]
        .as_str()
        .unwrap()
        .contains("invalid_grant"));

    asks_to_authorize(&app, &agent, "ann", "conv-refresh-2").await;
}
