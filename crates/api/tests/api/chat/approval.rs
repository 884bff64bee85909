//! Tool calls that need approval: the turn stops at the request, and an
//! approved call runs, a denied one is told to the model, a forged approval
//! id is refused.

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

use super::{assert_tool_results_answer_calls, q_schema, ECHO};

/// Runs a turn that asks for approval and returns (conversation body, the
/// assistant message as stored).
async fn pending_approval(
    app: &TestApp,
    model: &str,
    conversation: &str,
) -> (String, Value, Value) {
    let tool = app.upload(ACCOUNT_A, "echo", ECHO, q_schema()).await;
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
    let user = user_turn(conversation, "clean up");
    let turn = app.turn(ACCOUNT_A, &agent, user.clone()).await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let types = turn.types();
    let at = types
        .iter()
        .position(|t| t == "tool-approval-request")
        .unwrap();
    assert_eq!(types[at - 1], "tool-input-available");
    assert_eq!(turn.of_type("finish")[0]["finishReason"], "tool-calls");
    assert!(turn.of_type("tool-output-available").is_empty());
    let (_, stored) = app
        .request(
            reqwest::Method::GET,
            &format!("/conversations/{conversation}"),
            ACCOUNT_A,
            None,
        )
        .await;
    let assistant = stored["messages"][1].clone();
    assert_eq!(assistant["parts"][1]["state"], "approval-requested");
    assert_eq!(
        assistant["parts"][1]["approval"]["id"],
        turn.of_type("tool-approval-request")[0]["approvalId"]
    );
    (agent, user, assistant)
}

fn respond(user: &Value, assistant: &Value, approval_id: &Value, approved: bool) -> Value {
    let mut assistant = assistant.clone();
    assistant["parts"][1]["state"] = json!("approval-responded");
    assistant["parts"][1]["approval"] =
        json!({"id": approval_id, "approved": approved, "reason": "reviewed"});
    json!({
        "id": user["id"],
        "messages": [user["messages"][0], assistant],
        "trigger": "submit-message",
        "messageId": assistant["id"],
    })
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_approved_call_runs_and_continues_the_same_message(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let (agent, user, assistant) = pending_approval(&app, "approve", "conv-approve").await;
    let approval_id = assistant["parts"][1]["approval"]["id"].clone();
    let turn = app
        .turn(
            ACCOUNT_A,
            &agent,
            respond(&user, &assistant, &approval_id, true),
        )
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert_eq!(
        turn.chunks[0],
        json!({"type": "start", "messageId": assistant["id"]})
    );
    assert_eq!(
        turn.chunks[1]["type"], "tool-output-available",
        "{:?}",
        turn.chunks
    );
    assert_eq!(turn.chunks[1]["output"]["echo"], json!({"q": "rm -rf"}));
    assert_eq!(turn.text(), "Handled.");
    let requests = app.model.requests("approve");
    assert_eq!(requests.len(), 2);
    assert_tool_results_answer_calls(&requests[1]);
    let (_, stored) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-approve",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(stored["messages"].as_array().unwrap().len(), 2);
    assert_eq!(
        stored["messages"][1]["parts"][1]["state"],
        "output-available"
    );
    assert_eq!(
        stored["messages"][1]["parts"][1]["approval"]["approved"],
        true
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_denied_call_does_not_run_and_the_model_is_told(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let (agent, user, assistant) = pending_approval(&app, "deny", "conv-deny").await;
    let approval_id = assistant["parts"][1]["approval"]["id"].clone();
    let turn = app
        .turn(
            ACCOUNT_A,
            &agent,
            respond(&user, &assistant, &approval_id, false),
        )
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert_eq!(
        turn.chunks[1],
        json!({"type": "tool-output-denied", "toolCallId": "call_ap"})
    );
    assert!(turn.of_type("tool-output-available").is_empty());
    let told = app.model.requests("deny")[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        told["content"].as_str().unwrap().contains("denied"),
        "{told}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_forged_approval_id_is_refused_and_changes_nothing(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let (agent, user, assistant) = pending_approval(&app, "forged", "conv-forged").await;
    let turn = app
        .turn(
            ACCOUNT_A,
            &agent,
            respond(&user, &assistant, &json!("apr_forged"), true),
        )
        .await;
    assert_eq!(turn.status, 409, "{}", turn.body);
    assert_eq!(turn.json()["error"]["code"], "approval_not_pending");
    let (_, stored) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-forged",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(stored["messages"][1], assistant);
    assert_eq!(app.model.request_count("forged"), 1);
    // The real id still works afterwards.
    let approval_id = assistant["parts"][1]["approval"]["id"].clone();
    let turn = app
        .turn(
            ACCOUNT_A,
            &agent,
            respond(&user, &assistant, &approval_id, true),
        )
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
}
