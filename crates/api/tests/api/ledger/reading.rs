//! Reading the ledger: newest first, filtered, paged under a cursor that
//! misses and repeats nothing; malformed filters are 400s naming them; and
//! another account's attempts are invisible (a 404 by id).

use std::collections::HashSet;

use serde_json::{json, Value};
use sqlx::PgPool;

use super::ended_calls;
use crate::app::TestApp;
use crate::support::*;

const ECHO: &str = "export default { async execute(ctx, input) { return input; } };";
const THROWS: &str = "export default { async execute() { throw new Error('no'); } };";

async fn get(app: &TestApp, account: &str, path: &str) -> (u16, Value) {
    app.request(reqwest::Method::GET, path, account, None).await
}

#[sqlx::test(migrations = "../../migrations")]
async fn pages_follow_the_cursor_newest_first_and_filters_narrow(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let echo = app
        .upload(ACCOUNT_A, "echo", ECHO, json!({"type": "object"}))
        .await;
    let throws = app
        .upload(ACCOUNT_A, "throws", THROWS, json!({"type": "object"}))
        .await;
    for n in 0..5 {
        app.invoke(ACCOUNT_A, &echo, json!({"input": {"n": n}}))
            .await;
    }
    for _ in 0..2 {
        app.invoke(ACCOUNT_A, &throws, json!({"input": {}})).await;
    }
    let all = ended_calls(&app, ACCOUNT_A, "limit=100", 7).await;
    assert_eq!(all.len(), 7);

    let mut seen = Vec::new();
    let mut path = "/tool-calls?limit=3".to_owned();
    loop {
        let (status, page) = get(&app, ACCOUNT_A, &path).await;
        assert_eq!(status, 200, "{page}");
        let calls = page["toolCalls"].as_array().unwrap();
        assert!(calls.len() <= 3);
        seen.extend(calls.iter().map(|c| c["id"].as_str().unwrap().to_owned()));
        match page["nextCursor"].as_str() {
            Some(cursor) => path = format!("/tool-calls?limit=3&cursor={cursor}"),
            None => break,
        }
    }
    let listed: Vec<String> = all
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        seen, listed,
        "the pages together are the whole list, in order"
    );
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 7);
    let starts: Vec<&str> = all
        .iter()
        .map(|c| c["startedAt"].as_str().unwrap())
        .collect();
    let mut newest_first = starts.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(starts, newest_first);

    let (_, failed) = get(&app, ACCOUNT_A, "/tool-calls?status=tool_error").await;
    let failed = failed["toolCalls"].as_array().unwrap();
    assert_eq!(failed.len(), 2);
    assert!(failed.iter().all(|c| c["toolName"] == "throws"));
    let (_, echoes) = get(&app, ACCOUNT_A, "/tool-calls?tool=echo&status=ok").await;
    assert_eq!(echoes["toolCalls"].as_array().unwrap().len(), 5);
    let (_, none) = get(&app, ACCOUNT_A, "/tool-calls?tool=echo&status=tool_error").await;
    assert_eq!(none["toolCalls"], json!([]));
    let (_, future) = get(&app, ACCOUNT_A, "/tool-calls?since=2999-01-01T00:00:00Z").await;
    assert_eq!(future["toolCalls"], json!([]));
    let (_, past) = get(
        &app,
        ACCOUNT_A,
        "/tool-calls?until=2999-01-01T00:00:00Z&limit=100",
    )
    .await;
    assert_eq!(past["toolCalls"].as_array().unwrap().len(), 7);
    let (_, by_user) = get(&app, ACCOUNT_A, "/tool-calls?user=someone-else").await;
    assert_eq!(by_user["toolCalls"], json!([]));
}

#[sqlx::test(migrations = "../../migrations")]
async fn malformed_filters_are_refused_naming_them(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    for (query, field) in [
        ("status=fine", "status"),
        ("agentId=nope", "agentId"),
        ("since=yesterday", "since"),
        ("until=2024-13-01", "until"),
        ("cursor=zz", "cursor"),
        ("limit=0", "limit"),
        ("limit=100000", "limit"),
        ("tool=a%00b", "tool"),
        ("conversationId=%00", "conversationId"),
        ("user=%00", "user"),
    ] {
        let (status, body) = get(&app, ACCOUNT_A, &format!("/tool-calls?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }
    let (status, body) = get(&app, ACCOUNT_A, "/tool-calls?color=red").await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = get(&app, ACCOUNT_A, "/tool-calls/tcl_nothex").await;
    assert_eq!(status, 404);
}

#[sqlx::test(migrations = "../../migrations")]
async fn another_accounts_attempts_are_invisible(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let echo = app
        .upload(ACCOUNT_A, "echo", ECHO, json!({"type": "object"}))
        .await;
    app.invoke(ACCOUNT_A, &echo, json!({"input": {}})).await;
    let calls = ended_calls(&app, ACCOUNT_A, "", 1).await;
    let id = calls[0]["id"].as_str().unwrap();
    assert!(id.starts_with("tcl_"), "{id}");

    let (status, own) = get(&app, ACCOUNT_A, &format!("/tool-calls/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(own, calls[0]);
    let (status, body) = get(&app, ACCOUNT_B, &format!("/tool-calls/{id}")).await;
    assert_eq!(status, 404, "{body}");
    let (status, listed) = get(&app, ACCOUNT_B, "/tool-calls").await;
    assert_eq!(status, 200);
    assert_eq!(listed["toolCalls"], json!([]));
}

/// An HS256 token for `account` acting for end user `user`.
fn token_for(account: &str, user: &str) -> String {
    sign(
        jsonwebtoken::Algorithm::HS256,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
        json!({"account_id": account, "sub": user, "exp": now() + 3600}),
        None,
    )
}

#[sqlx::test(migrations = "../../migrations")]
async fn calls_are_recorded_for_the_end_user_their_token_names(pool: PgPool) {
    let app = crate::app::spawn_live_app(pool).await;
    let echo = app
        .upload(ACCOUNT_A, "echo", ECHO, json!({"type": "object"}))
        .await;
    let client = reqwest::Client::new();
    let invoked = client
        .post(format!("{}/accounts/me/tools/{echo}/invoke", app.base()))
        .bearer_auth(token_for(ACCOUNT_A, "ada"))
        .json(&json!({"input": {"by": "ada"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(invoked.status(), 200);
    app.model.script(
        "for-user",
        vec![
            toolserver_testsupport::Reply::tool_call("u1", "echo", json!({"by": "grace"})),
            toolserver_testsupport::Reply::text("Done."),
        ],
    );
    let agent = app.agent(ACCOUNT_A, "for-user", json!({ &echo: {} })).await;
    let turn = client
        .post(format!("{}/agents/{agent}/chat", app.base()))
        .bearer_auth(token_for(ACCOUNT_A, "grace"))
        .json(&user_turn("conv-user", "go"))
        .send()
        .await
        .unwrap();
    assert_eq!(turn.status(), 200);
    turn.text().await.unwrap();
    app.invoke(ACCOUNT_A, &echo, json!({"input": {"by": "nobody"}}))
        .await;

    let all = ended_calls(&app, ACCOUNT_A, "", 3).await;
    assert_eq!(all.len(), 3, "{all:?}");
    for (user, by) in [("ada", "ada"), ("grace", "grace")] {
        let (_, page) = get(&app, ACCOUNT_A, &format!("/tool-calls?user={user}")).await;
        let calls = page["toolCalls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{user}: {page}");
        assert_eq!(calls[0]["user"], user);
        assert!(calls[0]["input"]["text"].as_str().unwrap().contains(by));
    }
    let unnamed = all.iter().find(|c| c.get("user").is_none()).unwrap();
    assert!(unnamed["input"]["text"]
        .as_str()
        .unwrap()
        .contains("nobody"));
}
