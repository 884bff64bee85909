//! Layers: an agent's policies (its config's `policies`) can only narrow
//! the account's. A forbid of either layer wins; the agent permitting
//! everything does not lift the account's forbid. An agent's policies are
//! validated at save like the account's.

use serde_json::json;
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::spawn_live_app;
use crate::support::*;

use super::{explain, save_policies, tool};

#[sqlx::test(migrations = "../../migrations")]
async fn an_agents_layer_narrows_the_accounts_and_never_widens_it(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let lookup = tool(&app, ACCOUNT_A, "lookup", Some("read")).await;
    let refund = tool(&app, ACCOUNT_A, "refund", None).await;
    let wipe = tool(&app, ACCOUNT_A, "wipe", None).await;
    save_policies(
        &app,
        ACCOUNT_A,
        r#"@id("everything") @decision("allow") permit(principal, action, resource);
           @id("no-wipe") forbid(principal, action == Action::"wipe", resource);"#,
    )
    .await;
    let mut config = app.agent_config("layered", json!({ &lookup: {}, &refund: {}, &wipe: {} }));
    config["policies"] = json!(
        r#"@id("anything") @decision("allow") permit(principal, action, resource);
           @id("no-lookup") forbid(principal, action == Action::"lookup", resource);"#
    );
    let agent = app
        .agent_with_config(ACCOUNT_A, "layered", config.clone())
        .await;
    let agent = agent["agentId"].as_str().unwrap();

    let decide = |tool: &'static str| {
        explain(
            &app,
            json!({"user": "ann", "agentId": agent, "tool": tool, "input": {"amount": 1}}),
        )
    };
    let (_, wiped) = decide("wipe").await;
    assert_eq!(
        (&wiped["decision"], &wiped["policies"]),
        (&json!("deny"), &json!(["account:no-wipe"])),
        "the agent's permit does not lift the account's forbid: {wiped}"
    );
    let (_, looked) = decide("lookup").await;
    assert_eq!(
        (&looked["decision"], &looked["policies"]),
        (&json!("deny"), &json!(["agent:no-lookup"])),
        "{looked}"
    );
    let (_, refunded) = decide("refund").await;
    assert_eq!(refunded["decision"], "allow", "{refunded}");
    assert_eq!(
        refunded["policies"],
        json!(["account:everything", "agent:anything"])
    );

    app.model.script("layered", vec![Reply::text("Hello.")]);
    let turn = app.say(ACCOUNT_A, agent, "conv-layered", "hi").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let offered = &app.model.requests("layered")[0]["tools"];
    let names: Vec<&str> = offered
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["refund"], "{offered}");

    config["policies"] = json!(r#"forbid(principal, action == Action::"nope", resource);"#);
    let (status, refused) = app
        .request(
            reqwest::Method::POST,
            "/agents",
            ACCOUNT_A,
            Some(json!({"name": "bad", "config": config})),
        )
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["field"], "config.policies");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"unrecognized action `Action::"nope"`"#),
        "{message}"
    );
}

/// `PUT` of `text` at `path` as account A; the status and the answer.
async fn put_at(app: &crate::app::TestApp, path: &str, text: &str) -> (u16, serde_json::Value) {
    app.request(
        reqwest::Method::PUT,
        path,
        ACCOUNT_A,
        Some(json!({ "policies": text })),
    )
    .await
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_end_users_and_a_conversations_layers_narrow_only_for_them(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let lookup = tool(&app, ACCOUNT_A, "lookup", Some("read")).await;
    let refund = tool(&app, ACCOUNT_A, "refund", Some("read")).await;
    save_policies(
        &app,
        ACCOUNT_A,
        r#"@id("reads") permit(principal, action, resource) when { resource.effects == "read" };
           @id("no-big-refunds") forbid(principal, action == Action::"refund", resource) when { context.input.amount > 1000 };"#,
    )
    .await;
    let (status, saved) = put_at(
        &app,
        "/policies/users/ann",
        r#"@id("ann-no-lookup") forbid(principal, action == Action::"lookup", resource);
           @id("ann-all") @decision("allow") permit(principal, action, resource);"#,
    )
    .await;
    assert_eq!((status, &saved["version"]), (200, &json!(1)), "{saved}");
    let (status, refused) = put_at(
        &app,
        "/policies/users/ann",
        r#"forbid(principal, action == Action::"nope", resource);"#,
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["field"], "policies");
    let (_, kept) = app
        .request(reqwest::Method::GET, "/policies/users/ann", ACCOUNT_A, None)
        .await;
    assert_eq!(kept["version"], 1, "nothing refused was saved: {kept}");
    let (_, other) = app
        .request(reqwest::Method::GET, "/policies/users/ann", ACCOUNT_B, None)
        .await;
    assert_eq!(
        other["version"], 0,
        "another account's layer is its own: {other}"
    );

    let ask = |user: &'static str, tool: &'static str, amount: i64| {
        explain(
            &app,
            json!({"user": user, "tool": tool, "input": {"amount": amount}}),
        )
    };
    let (_, ann) = ask("ann", "lookup", 1).await;
    assert_eq!(
        (&ann["decision"], &ann["policies"]),
        (&json!("deny"), &json!(["user:ann-no-lookup"])),
        "{ann}"
    );
    let (_, bob) = ask("bob", "lookup", 1).await;
    assert_eq!(bob["decision"], "allow", "ann's layer is hers alone: {bob}");
    let (_, big) = ask("ann", "refund", 5000).await;
    assert_eq!(
        (&big["decision"], &big["policies"]),
        (&json!("deny"), &json!(["account:no-big-refunds"])),
        "ann's permit-all does not widen the account's forbid: {big}"
    );

    let agent = app
        .agent(ACCOUNT_A, "narrowed", json!({ &lookup: {}, &refund: {} }))
        .await;
    let (status, saved) = put_at(
        &app,
        "/conversations/conv-narrow/policies",
        r#"@id("no-refunds-here") forbid(principal, action == Action::"refund", resource);
           @id("rest") permit(principal, action, resource);"#,
    )
    .await;
    assert_eq!(status, 200, "{saved}");
    let (_, here) = explain(
        &app,
        json!({"user": "", "agentId": agent, "conversationId": "conv-narrow", "tool": "refund", "input": {"amount": 1}}),
    )
    .await;
    assert_eq!(
        here["policies"],
        json!(["conversation:no-refunds-here"]),
        "{here}"
    );

    app.model.script(
        "narrowed",
        vec![Reply::text("Here."), Reply::text("Elsewhere.")],
    );
    let turn = app.say(ACCOUNT_A, &agent, "conv-narrow", "hi").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let turn = app.say(ACCOUNT_A, &agent, "conv-free", "hi").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let names = |request: &serde_json::Value| -> Vec<String> {
        let mut names: Vec<String> = request["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["function"]["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    let requests = app.model.requests("narrowed");
    assert_eq!(
        names(&requests[0]),
        ["lookup"],
        "the conversation's layer hides refund"
    );
    assert_eq!(names(&requests[1]), ["lookup", "refund"]);
}
