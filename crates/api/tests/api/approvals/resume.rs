//! Deciding from another client resumes the turn on the server; a denial
//! reaches the model; who may decide; another account sees nothing.

use serde_json::json;
use sqlx::PgPool;
use std::time::Duration;

use super::*;

#[sqlx::test(migrations = "../../migrations")]
async fn an_approval_from_another_client_resumes_the_turn_on_the_server(pool: PgPool) {
    let app = app_with_ttl(pool, Duration::from_secs(3600)).await;
    let (_, id) = asked(&app, "approve-elsewhere", "conv-elsewhere").await;
    let (status, page) = app
        .request(
            reqwest::Method::GET,
            "/approvals?status=pending",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    let listed = page["approvals"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{page}");
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["tool"], "echo");
    assert_eq!(listed[0]["input"], json!({"q": "rm -rf"}));
    assert_eq!(listed[0]["conversationId"], "conv-elsewhere");
    assert!(listed[0]["why"].as_str().unwrap().contains("needsApproval"));

    let (status, other) = app
        .request(
            reqwest::Method::GET,
            &format!("/approvals/{id}"),
            ACCOUNT_B,
            None,
        )
        .await;
    assert_eq!(status, 404, "{other}");
    let (status, _) = decide(&app, &id, &token(ACCOUNT_B), json!({"approved": true})).await;
    assert_eq!(status, 404, "another account cannot decide it");
    let (_, b_page) = app
        .request(reqwest::Method::GET, "/approvals", ACCOUNT_B, None)
        .await;
    assert_eq!(b_page["approvals"], json!([]));

    let (status, decided) = decide(
        &app,
        &id,
        &token(ACCOUNT_A),
        json!({"approved": true, "reason": "looks fine"}),
    )
    .await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["approval"]["status"], "approved");
    assert_eq!(decided["approval"]["decidedBy"], "account");
    assert!(decided["statusId"].is_string(), "{decided}");

    let stored = settled(&app, "conv-elsewhere", "output-available").await;
    let messages = stored["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "the turn read on in the same message");
    let call = &messages[1]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["toolCallId"] == "call_ap")
        .unwrap()
        .clone();
    assert_eq!(call["output"]["echo"], json!({"q": "rm -rf"}));
    assert_eq!(call["approval"]["approved"], true);
    let requests = app.model.requests("approve-elsewhere");
    assert_eq!(requests.len(), 2, "one model pass after the decision");
    let after = approval(&app, &id).await;
    assert!(after["resumedAt"].is_string(), "{after}");

    let (status, again) = decide(&app, &id, &token(ACCOUNT_A), json!({"approved": false})).await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["error"]["code"], "approval_decided");
    assert_eq!(app.model.requests("approve-elsewhere").len(), 2);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_denial_reaches_the_model_with_its_reason(pool: PgPool) {
    let app = app_with_ttl(pool, Duration::from_secs(3600)).await;
    let (_, id) = asked(&app, "deny-elsewhere", "conv-deny-elsewhere").await;
    let (status, decided) = decide(
        &app,
        &id,
        &token(ACCOUNT_A),
        json!({"approved": false, "reason": "not on a Friday"}),
    )
    .await;
    assert_eq!(status, 200, "{decided}");
    settled(&app, "conv-deny-elsewhere", "output-denied").await;
    let requests = app.model.requests("deny-elsewhere");
    assert_eq!(requests.len(), 2);
    let told = requests[1].to_string();
    assert!(told.contains("not on a Friday"), "{told}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn only_the_approvers_a_policy_names_may_decide(pool: PgPool) {
    let app = app_with_ttl(pool, Duration::from_secs(3600)).await;
    let tool = app
        .upload(
            ACCOUNT_A,
            "echo",
            ECHO,
            json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        )
        .await;
    let (status, saved) = app
        .request(
            reqwest::Method::PUT,
            "/policies",
            ACCOUNT_A,
            Some(
                json!({"policies": r#"@id("review") @decision("ask") @approvers("ann, cho")
                permit(principal, action == Action::"echo", resource);"#}),
            ),
        )
        .await;
    assert_eq!(status, 200, "{saved}");
    app.model.script(
        "approvers",
        vec![
            Reply::tool_call("call_ap", "echo", json!({"q": "x"})),
            Reply::text("Done."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "approvers", json!({ &tool: {} }))
        .await;
    let turn = app
        .turn(ACCOUNT_A, &agent, user_turn("conv-approvers", "go"))
        .await;
    let id = turn.of_type("tool-approval-request")[0]["approvalId"]
        .as_str()
        .unwrap()
        .to_owned();
    let stored = approval(&app, &id).await;
    assert_eq!(stored["approvers"], json!(["ann", "cho"]));
    assert!(
        stored["why"].as_str().unwrap().contains("`review`"),
        "{stored}"
    );
    let (status, refused) = decide(&app, &id, &user_token("bob"), json!({"approved": true})).await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["error"]["code"], "not_an_approver");
    let (status, decided) = decide(&app, &id, &user_token("ann"), json!({"approved": true})).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["approval"]["decidedBy"], "user:ann");
    settled(&app, "conv-approvers", "output-available").await;
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_approval_answered_in_the_chat_is_no_longer_pending(pool: PgPool) {
    let app = app_with_ttl(pool, Duration::from_secs(3600)).await;
    let (agent, id) = asked(&app, "in-chat", "conv-in-chat").await;
    let stored = conversation(&app, "conv-in-chat").await;
    let user = user_turn("conv-in-chat", "clean up");
    let mut assistant = stored["messages"][1].clone();
    let at = assistant["parts"]
        .as_array()
        .unwrap()
        .iter()
        .position(|p| p["toolCallId"] == "call_ap")
        .unwrap();
    assistant["parts"][at]["state"] = json!("approval-responded");
    assistant["parts"][at]["approval"] = json!({"id": id, "approved": true});
    let body = json!({
        "id": "conv-in-chat",
        "messages": [user["messages"][0], assistant],
        "trigger": "submit-message",
        "messageId": assistant["id"],
    });
    let turn = app.turn(ACCOUNT_A, &agent, body).await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let answered = approval(&app, &id).await;
    assert_eq!(answered["status"], "approved");
    assert_eq!(answered["decidedBy"], "chat");
    assert!(answered["resumedAt"].is_string());
    let (status, _) = decide(&app, &id, &token(ACCOUNT_A), json!({"approved": false})).await;
    assert_eq!(status, 409);
}
