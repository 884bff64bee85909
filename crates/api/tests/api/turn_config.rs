//! What a turn reads before it runs (its agent, the tools its config names,
//! the account's and the conversation's policies) is kept by each server: a
//! warm turn reads none of it from Postgres, a change through the API
//! reaches the next turn at once, and a change made straight in the
//! database (as another server would) reaches the turns after its notice.

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_store::notified::LISTENER_APPLICATION_NAME;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::Reply;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

/// The scripted model the agent talks to.
const MODEL: &str = "cached";

/// The conversation the turns continue.
const CONVERSATION: &str = "conv-cached";

const ECHO: &str = "export default { async execute(ctx, input) { return { echo: input }; } };";

/// Allows everything.
const ALLOW_ALL: &str = r#"@id("all") @decision("allow") permit(principal, action, resource);"#;

/// Allows everything except calls of `tool`.
fn all_but(tool: &str) -> String {
    format!(
        r#"{ALLOW_ALL} @id("not-{tool}") forbid(principal, action == Action::"{tool}", resource);"#
    )
}

/// What the model was given on the last turn: the system prompt and the
/// offered tools with their descriptions.
struct Seen {
    system: String,
    tools: Vec<(String, String)>,
}

impl Seen {
    fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|(name, _)| name.as_str()).collect()
    }
}

/// Runs one turn as account A; what the model was given.
async fn turn(app: &TestApp, agent: &str) -> Seen {
    let turn = app.say(ACCOUNT_A, agent, CONVERSATION, "hi").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let requests = app.model.requests(MODEL);
    let last = requests.last().unwrap();
    let tools = last["tools"].as_array().cloned().unwrap_or_default();
    Seen {
        system: last["messages"][0]["content"].as_str().unwrap().to_owned(),
        tools: tools
            .iter()
            .map(|tool| {
                let function = &tool["function"];
                let text = |key: &str| function[key].as_str().unwrap_or_default().to_owned();
                (text("name"), text("description"))
            })
            .collect(),
    }
}

/// How many rows the turn config cache read from Postgres so far.
fn reads(app: &TestApp) -> u64 {
    app.state.harness().config_cache().reads()
}

/// Turns until one reads nothing from Postgres for its config.
async fn warm(app: &TestApp, agent: &str) {
    until("a turn to read none of its config", || async {
        let before = reads(app);
        turn(app, agent).await;
        reads(app) == before
    })
    .await;
}

/// A request as account A that must succeed.
async fn ok(app: &TestApp, method: reqwest::Method, path: &str, body: Value) {
    let (status, answer) = app.request(method, path, ACCOUNT_A, Some(body)).await;
    assert_eq!(status, 200, "{path}: {answer}");
}

/// An agent of account A offering the tools `lookup` and `refund`, with an
/// account policy and a conversation policy in force; its id and
/// `lookup`'s.
async fn agent_with_policies(app: &TestApp) -> (String, String) {
    app.model.script(MODEL, vec![Reply::text("Hello.")]);
    let schema = json!({"type": "object"});
    let lookup = app.upload(ACCOUNT_A, "lookup", ECHO, schema.clone()).await;
    let refund = app.upload(ACCOUNT_A, "refund", ECHO, schema).await;
    let agent = app
        .agent(ACCOUNT_A, MODEL, json!({ &lookup: {}, &refund: {} }))
        .await;
    ok(
        app,
        reqwest::Method::PUT,
        "/policies",
        json!({"policies": ALLOW_ALL}),
    )
    .await;
    ok(
        app,
        reqwest::Method::PUT,
        &format!("/conversations/{CONVERSATION}/policies"),
        json!({"policies": ALLOW_ALL}),
    )
    .await;
    (agent, lookup)
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_warm_turn_reads_no_config_and_the_next_sees_a_change_through_the_api(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let (agent, lookup) = agent_with_policies(&app).await;
    warm(&app, &agent).await;
    let before = reads(&app);
    let seen = turn(&app, &agent).await;
    assert_eq!(reads(&app), before, "a warm turn reads no config");
    assert_eq!(seen.system, "You are a test agent.");
    assert_eq!(seen.names(), ["lookup", "refund"]);

    let mut config = app.agent_config(MODEL, json!({ &lookup: {} }));
    config["systemPrompt"] = json!("You are the new agent.");
    ok(
        &app,
        reqwest::Method::PATCH,
        &format!("/agents/{agent}"),
        json!({ "config": config }),
    )
    .await;
    let seen = turn(&app, &agent).await;
    assert_eq!(seen.system, "You are the new agent.");
    assert_eq!(seen.names(), ["lookup"]);

    ok(
        &app,
        reqwest::Method::PATCH,
        &format!("/accounts/me/tools/{lookup}"),
        json!({"description": "Looks things up, newly."}),
    )
    .await;
    assert_eq!(
        turn(&app, &agent).await.tools,
        [("lookup".to_owned(), "Looks things up, newly.".to_owned())]
    );

    ok(
        &app,
        reqwest::Method::PUT,
        "/policies",
        json!({"policies": all_but("lookup")}),
    )
    .await;
    assert_eq!(turn(&app, &agent).await.names(), Vec::<&str>::new());
    let (status, denied) = app.invoke(ACCOUNT_A, &lookup, json!({"input": {}})).await;
    assert_eq!(
        status, 403,
        "a direct call is judged by the new policies: {denied}"
    );

    ok(
        &app,
        reqwest::Method::PUT,
        "/policies",
        json!({"policies": ALLOW_ALL}),
    )
    .await;
    assert_eq!(turn(&app, &agent).await.names(), ["lookup"]);
    ok(
        &app,
        reqwest::Method::PUT,
        &format!("/conversations/{CONVERSATION}/policies"),
        json!({"policies": all_but("lookup")}),
    )
    .await;
    assert_eq!(turn(&app, &agent).await.names(), Vec::<&str>::new());

    let (status, _) = app
        .request(
            reqwest::Method::DELETE,
            &format!("/agents/{agent}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 204);
    let gone = app.say(ACCOUNT_A, &agent, "conv-after", "hi").await;
    assert_eq!(gone.status, 404, "{}", gone.body);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_change_made_straight_in_the_database_reaches_the_turns_after_its_notice(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let (agent, _) = agent_with_policies(&app).await;
    warm(&app, &agent).await;

    sqlx::query(
        "UPDATE agents SET config = jsonb_set(config, '{systemPrompt}', '\"Changed elsewhere.\"')",
    )
    .execute(&pool)
    .await
    .unwrap();
    until("the turn to run the changed agent", || async {
        turn(&app, &agent).await.system == "Changed elsewhere."
    })
    .await;

    sqlx::query("UPDATE tools SET description = 'Changed elsewhere.' WHERE name = 'lookup'")
        .execute(&pool)
        .await
        .unwrap();
    until("the turn to offer the changed tool", || async {
        let seen = turn(&app, &agent).await;
        seen.tools
            .contains(&("lookup".to_owned(), "Changed elsewhere.".to_owned()))
    })
    .await;

    sqlx::query("UPDATE account_policies SET policies = $1, version = version + 1")
        .bind(all_but("lookup"))
        .execute(&pool)
        .await
        .unwrap();
    until("the account's new policies to apply", || async {
        turn(&app, &agent).await.names() == ["refund"]
    })
    .await;

    sqlx::query("DELETE FROM account_policies")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE scoped_policies SET policies = $1, version = version + 1 \
         WHERE scope = 'conversation'",
    )
    .bind(all_but("refund"))
    .execute(&pool)
    .await
    .unwrap();
    until("the conversation's new policies to apply", || async {
        turn(&app, &agent).await.names() == ["lookup"]
    })
    .await;

    sqlx::query("DELETE FROM agents")
        .execute(&pool)
        .await
        .unwrap();
    until("the deleted agent's turns to be refused", || async {
        app.say(ACCOUNT_A, &agent, "conv-after", "hi").await.status == 404
    })
    .await;
}

/// The backends listening for notifications (the turn configs' among
/// them), but the caller's.
async fn listeners(pool: &PgPool) -> Vec<i32> {
    let pids: Vec<(i32,)> = sqlx::query_as(
        "SELECT pid FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
           AND application_name = $1 AND query LIKE '%toolserver_turn_config%'",
    )
    .bind(LISTENER_APPLICATION_NAME)
    .fetch_all(pool)
    .await
    .unwrap();
    pids.into_iter().map(|(pid,)| pid).collect()
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_change_made_while_the_listener_was_down_is_seen_once_it_is_back(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let (agent, _) = agent_with_policies(&app).await;
    warm(&app, &agent).await;

    let cut = listeners(&pool).await;
    assert_eq!(cut.len(), 1, "one listener: {cut:?}");
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(cut[0])
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE agents SET config = jsonb_set(config, '{systemPrompt}', '\"Changed unheard.\"')",
    )
    .execute(&pool)
    .await
    .unwrap();
    until("the listener to be back", || async {
        listeners(&pool).await.iter().any(|pid| !cut.contains(pid))
    })
    .await;
    warm(&app, &agent).await;
    assert_eq!(
        turn(&app, &agent).await.system,
        "Changed unheard.",
        "nothing kept from before the listener was lost is served"
    );
}
