//! Saving policies: validated against a schema of the account's tools (an
//! unknown tool or attribute is a 422 with the validator's message, and
//! nothing is saved), read back, invisible to another account; and
//! `POST /policies/explain` naming the policies that decided.

use serde_json::json;
use sqlx::PgPool;

use crate::app::spawn_live_app;
use crate::support::*;

use super::{explain, put, save_policies, tool};

#[sqlx::test(migrations = "../../migrations")]
async fn a_policy_naming_an_unknown_tool_or_attribute_is_refused_with_the_validators_message(
    pool: PgPool,
) {
    let app = spawn_live_app(pool).await;
    tool(&app, ACCOUNT_A, "refund", None).await;
    let refused = [
        (
            r#"permit(principal, action == Action::"nope", resource);"#,
            r#"unrecognized action `Action::"nope"`"#,
        ),
        (
            r#"permit(principal, action == Action::"refund", resource) when { context.input.currency == "EUR" };"#,
            "attribute `input.currency` in context for Action::\"refund\" not found",
        ),
        (
            r#"permit(principal, action, resource) when { resource.owner == "me" };"#,
            "attribute `owner`",
        ),
        (
            r#"permit(principal, action, resource == Tool::"nope");"#,
            "the account has no tool named \"nope\"",
        ),
        (
            "permit(principal, action, resource",
            "unexpected end of input",
        ),
    ];
    for (policies, says) in refused {
        let (status, body) = put(&app, ACCOUNT_A, policies).await;
        assert_eq!(status, 422, "{policies}: {body}");
        assert_eq!(body["error"]["field"], "policies", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{policies}: {message}");
    }
    let (_, stored) = app
        .request(reqwest::Method::GET, "/policies", ACCOUNT_A, None)
        .await;
    assert_eq!(
        stored,
        json!({"policies": "", "version": 0, "updatedAt": null, "approvalWebhook": null}),
        "nothing refused was saved"
    );
    for webhook in ["not a url", "ftp://example.com/hook", "file:///etc/passwd"] {
        let (status, body) = app
            .request(
                reqwest::Method::PUT,
                "/policies",
                ACCOUNT_A,
                Some(json!({"policies": "", "approvalWebhook": webhook})),
            )
            .await;
        assert_eq!(status, 422, "{webhook}: {body}");
        assert_eq!(body["error"]["field"], "approvalWebhook", "{body}");
    }

    let text = r#"permit(principal, action == Action::"refund", resource) when { context.input.amount < 500 };"#;
    let (status, saved) = put(&app, ACCOUNT_A, text).await;
    assert_eq!(status, 200, "{saved}");
    assert_eq!(
        (saved["policies"].as_str(), saved["version"].as_i64()),
        (Some(text), Some(1))
    );
    let (_, stored) = app
        .request(reqwest::Method::GET, "/policies", ACCOUNT_A, None)
        .await;
    assert_eq!(stored, saved);
}

#[sqlx::test(migrations = "../../migrations")]
async fn another_accounts_policies_are_invisible_and_do_not_apply(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    tool(&app, ACCOUNT_A, "refund", None).await;
    tool(&app, ACCOUNT_B, "refund", None).await;
    save_policies(&app, ACCOUNT_A, "forbid(principal, action, resource);").await;
    let (_, theirs) = app
        .request(reqwest::Method::GET, "/policies", ACCOUNT_B, None)
        .await;
    assert_eq!(theirs["version"], 0, "{theirs}");
    assert_eq!(theirs["policies"], "");
    let (status, called) = app
        .invoke(
            ACCOUNT_B,
            &tool_id(&app, ACCOUNT_B).await,
            json!({"input": {"amount": 1}}),
        )
        .await;
    assert_eq!(status, 200, "account A's policies do not reach B: {called}");
    let (status, refused) = app
        .invoke(
            ACCOUNT_A,
            &tool_id(&app, ACCOUNT_A).await,
            json!({"input": {"amount": 1}}),
        )
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (403, Some("policy_denied")),
        "{refused}"
    );
}

/// The id of `account`'s only tool.
async fn tool_id(app: &crate::app::TestApp, account: &str) -> String {
    let (_, listed) = app
        .request(reqwest::Method::GET, "/accounts/me/tools", account, None)
        .await;
    listed["tools"][0]["toolId"].as_str().unwrap().to_owned()
}

#[sqlx::test(migrations = "../../migrations")]
async fn explain_names_the_policies_that_decided(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    tool(&app, ACCOUNT_A, "refund", None).await;
    let (_, open) = explain(
        &app,
        json!({"user": "ann", "tool": "refund", "input": {"amount": 1}}),
    )
    .await;
    assert_eq!(
        open["decision"], "allow",
        "without policies, calls run: {open}"
    );
    assert_eq!(open["policies"], json!([]));
    save_policies(
        &app,
        ACCOUNT_A,
        r#"@id("small-refunds") permit(principal, action == Action::"refund", resource) when { context.input.amount < 500 };
           @id("no-mallory") forbid(principal == User::"mallory", action, resource);"#,
    )
    .await;
    let cases = [
        ("ann", 499, "allow", json!(["account:small-refunds"])),
        ("ann", 501, "deny", json!([])),
        ("mallory", 10, "deny", json!(["account:no-mallory"])),
    ];
    for (user, amount, decision, policies) in cases {
        let (status, answer) = explain(
            &app,
            json!({"user": user, "tool": "refund", "input": {"amount": amount}}),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            (&answer["decision"], &answer["policies"]),
            (&json!(decision), &policies),
            "{user} {amount}: {answer}"
        );
        assert!(
            !answer["reasons"].as_array().unwrap().is_empty(),
            "{answer}"
        );
    }
    let (_, nothing) = explain(
        &app,
        json!({"user": "ann", "tool": "refund", "input": {"amount": 501}}),
    )
    .await;
    assert_eq!(nothing["reasons"], json!(["no account policy allows it"]));
    let (status, unknown) =
        explain(&app, json!({"user": "ann", "tool": "nope", "input": {}})).await;
    assert_eq!(
        (status, unknown["error"]["field"].as_str()),
        (422, Some("tool")),
        "{unknown}"
    );
}
