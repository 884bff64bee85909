//! Approvals as durable records: a turn that stops on a call needing a
//! person's decision records an approval, which any client decides
//! (`POST /approvals/{id}`), or the one-time link its announcement carried;
//! the turn then resumes on the server. Who may decide, once, before the
//! expiry; another account sees none of it.

mod link;
mod resume;

use std::time::Duration;

use serde_json::{json, Value};
use toolserver_harness::lifecycle::LifecycleSettings;
use toolserver_harness::webhooks::WebhookSettings;
use toolserver_harness::HarnessSettings;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::Reply;

use crate::app::{fast_lifecycle, TestApp};
use crate::support::*;

/// Returns its input.
const ECHO: &str = "export default { async execute(ctx, input) { return { echo: input }; } };";

/// Settings with approvals that expire after `ttl`, and quick webhooks.
fn settings(ttl: Duration) -> HarnessSettings {
    let fast = fast_lifecycle();
    HarnessSettings {
        lifecycle: LifecycleSettings {
            approval_ttl: ttl,
            approval_resume_grace: Duration::from_millis(300),
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

/// A served app with background work, approvals expiring after `ttl`.
async fn app_with_ttl(pool: sqlx::PgPool, ttl: Duration) -> TestApp {
    TestApp::live(pool).harness(settings(ttl)).spawn().await
}

/// Runs a streamed turn of a new agent (model `model`) in `conversation`
/// whose call of `echo` needs approval; (agent, approval id).
async fn asked(app: &TestApp, model: &str, conversation: &str) -> (String, String) {
    let tool = app
        .upload(
            ACCOUNT_A,
            "echo",
            ECHO,
            json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        )
        .await;
    app.model.script(
        model,
        vec![
            Reply::tool_call("call_ap", "echo", json!({"q": "rm -rf"})),
            Reply::text("Handled."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, model, json!({ &tool: {"needsApproval": true} }))
        .await;
    let turn = app
        .turn(ACCOUNT_A, &agent, user_turn(conversation, "clean up"))
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let request = turn.of_type("tool-approval-request");
    let id = request[0]["approvalId"].as_str().unwrap().to_owned();
    (agent, id)
}

/// `POST /approvals/{id}` as `token`'s bearer; the status and the answer.
async fn decide(app: &TestApp, id: &str, bearer: &str, body: Value) -> (u16, Value) {
    let response = app
        .client
        .post(format!("{}/approvals/{id}", app.base()))
        .bearer_auth(bearer)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The conversation `id` of account A, as stored.
async fn conversation(app: &TestApp, id: &str) -> Value {
    let path = format!("/conversations/{id}");
    let (status, body) = app
        .request(reqwest::Method::GET, &path, ACCOUNT_A, None)
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The conversation `id` once its assistant message's call has settled
/// in `state`.
async fn settled(app: &TestApp, id: &str, state: &str) -> Value {
    until("the resumed turn to settle the call", || async {
        let stored = conversation(app, id).await;
        stored["messages"][1]["parts"]
            .as_array()
            .is_some_and(|parts| parts.iter().any(|p| p["state"] == state))
            && stored["messages"][1]["parts"]
                .as_array()
                .is_some_and(|parts| parts.iter().any(|p| p["type"] == "text"))
    })
    .await;
    conversation(app, id).await
}

/// The approval `id` of account A.
async fn approval(app: &TestApp, id: &str) -> Value {
    let (status, body) = app
        .request(
            reqwest::Method::GET,
            &format!("/approvals/{id}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}
