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
