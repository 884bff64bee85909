//! Policies enforced before every call: a direct invoke that they deny or
//! ask about is a 403 naming the policy; in a turn, a tool they deny
//! whatever the input is not offered to the model, a call they deny fails
//! with the policy's name for the model to read, one they ask about waits
//! for approval; every refusal is on the ledger as `denied`.

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::spawn_live_app;
use crate::support::*;

use super::{denied, save_policies, tool};

/// Refunds below 500 run, larger ones wait for a person.
const REFUNDS: &str = r#"
@id("small-refunds") permit(principal, action == Action::"refund", resource) when { context.input.amount < 500 };
@id("review-large") @decision("ask") permit(principal, action == Action::"refund", resource) when { context.input.amount >= 500 };
"#;

#[sqlx::test(migrations = "../../migrations")]
async fn a_direct_invoke_runs_only_as_the_policies_say(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let refund = tool(&app, ACCOUNT_A, "refund", None).await;
    save_policies(&app, ACCOUNT_A, REFUNDS).await;
    let call = |amount: i64| app.invoke(ACCOUNT_A, &refund, json!({"input": {"amount": amount}}));

    let (status, ran) = call(499).await;
    assert_eq!(status, 200, "{ran}");
    assert_eq!(ran["output"]["echo"]["amount"], 499);
    let (status, asked) = call(501).await;
    assert_eq!(status, 403, "{asked}");
    assert_eq!(asked["error"]["code"], "approval_required");
    let message = asked["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("review-large") && message.contains("cannot wait for approval"),
        "{message}"
    );

    let frozen = format!(
        "{REFUNDS}\n@id(\"freeze\") forbid(principal, action, resource) when {{ context.input has amount && context.input.amount == 499 }};"
    );
    save_policies(&app, ACCOUNT_A, &frozen).await;
    let (status, refused) = call(499).await;
    assert_eq!(status, 403, "a forbid beats the permit: {refused}");
    assert_eq!(refused["error"]["code"], "policy_denied");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("`freeze`"), "{message}");
    assert_eq!(call(498).await.0, 200);

    let recorded = denied(&app, ACCOUNT_A, "refund", 2).await;
    let errors: Vec<&str> = recorded
        .iter()
        .map(|call| call["error"].as_str().unwrap())
        .collect();
    assert!(errors.iter().any(|e| e.contains("freeze")), "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("review-large")),
        "{errors:?}"
    );
    assert!(recorded.iter().all(|call| call["path"] == "invoke"));
}

/// The names of the tools offered in the model's request.
fn offered(request: &Value) -> Vec<String> {
    let mut names: Vec<String> = request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|tool| tool["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[sqlx::test(migrations = "../../migrations")]
async fn in_a_turn_a_denied_tool_is_not_offered_and_a_denied_call_names_the_policy(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let lookup = tool(&app, ACCOUNT_A, "lookup", Some("read")).await;
    let refund = tool(&app, ACCOUNT_A, "refund", None).await;
    let wipe = tool(&app, ACCOUNT_A, "wipe", Some("idempotent")).await;
    save_policies(
        &app,
        ACCOUNT_A,
        r#"
        @id("reads") permit(principal, action, resource) when { resource.effects == "read" };
        @id("small-refunds") permit(principal, action == Action::"refund", resource) when { context.input.amount < 500 };
        @id("refund-cap") forbid(principal, action == Action::"refund", resource) when { context.input.amount > 500 };
        @id("never-wipe") forbid(principal, action == Action::"wipe", resource);
        "#,
    )
    .await;
    app.model.script(
        "policed",
        vec![
            Reply::tool_call("c1", "refund", json!({"amount": 501}))
                .and_tool_call("c2", "refund", json!({"amount": 499}))
                .and_tool_call("c3", "wipe", json!({"amount": 1})),
            Reply::text("Done."),
        ],
    );
    let agent = app
        .agent(
            ACCOUNT_A,
            "policed",
            json!({ &lookup: {}, &refund: {}, &wipe: {} }),
        )
        .await;
    let turn = app
        .say(ACCOUNT_A, &agent, "conv-policed", "refund twice")
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);

    let requests = app.model.requests("policed");
    assert_eq!(
        offered(&requests[0]),
        ["lookup", "refund"],
        "wipe is never offered"
    );
    let errors: Vec<(&str, &str)> = turn
        .of_type("tool-output-error")
        .iter()
        .map(|chunk| {
            (
                chunk["toolCallId"].as_str().unwrap(),
                chunk["errorText"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(errors.len(), 2, "{}", turn.body);
    assert_eq!(errors[0].0, "c1");
    assert!(
        errors[0].1.contains("denies calling refund") && errors[0].1.contains("`refund-cap`"),
        "{errors:?}"
    );
    assert_eq!(errors[1].0, "c3");
    assert!(errors[1].1.contains("`never-wipe`"), "{errors:?}");
    let outputs = turn.of_type("tool-output-available");
    assert_eq!(outputs.len(), 1, "{}", turn.body);
    assert_eq!(outputs[0]["toolCallId"], "c2");
    let told = requests[1]["messages"].to_string();
    assert!(
        told.contains("refund-cap"),
        "the model reads the denial: {told}"
    );

    let recorded = denied(&app, ACCOUNT_A, "refund", 1).await;
    assert_eq!(recorded[0]["toolCallId"], "c1");
    assert_eq!(recorded[0]["path"], "turn");
    assert!(recorded[0]["error"]
        .as_str()
        .unwrap()
        .contains("refund-cap"));
    assert_eq!(denied(&app, ACCOUNT_A, "wipe", 1).await.len(), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn in_a_turn_a_call_the_policies_ask_about_waits_for_approval(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let refund = tool(&app, ACCOUNT_A, "refund", None).await;
    save_policies(&app, ACCOUNT_A, REFUNDS).await;
    app.model.script(
        "asking",
        vec![Reply::tool_call("c1", "refund", json!({"amount": 501}))],
    );
    let agent = app.agent(ACCOUNT_A, "asking", json!({ &refund: {} })).await;
    let turn = app
        .say(ACCOUNT_A, &agent, "conv-asking", "refund 501")
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let requests = turn.of_type("tool-approval-request");
    assert_eq!(requests.len(), 1, "{}", turn.body);
    assert_eq!(requests[0]["toolCallId"], "c1");
    assert!(
        turn.of_type("tool-output-available").is_empty(),
        "{}",
        turn.body
    );
    assert_eq!(turn.of_type("finish")[0]["finishReason"], "tool-calls");
}
