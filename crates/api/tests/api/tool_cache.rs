//! The tool cache: a warm direct call reads its tool from memory, and a
//! change to the tool reaches the next call, on the server that made the
//! change at once and on every other server through `NOTIFY`.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::wait::until;

use crate::app::{fs_store, TestApp};
use crate::support::*;

const V1: &str = "export default { execute() { return 'v1'; } };";
const V2: &[u8] = b"export default { execute() { return 'v2'; } };";

/// The output of one call of `tool` as `account`, or the status when it failed.
async fn output(app: &TestApp, account: &str, tool: &str, input: Value) -> Value {
    let (status, body) = app.invoke(account, tool, json!({ "input": input })).await;
    match status {
        200 => body["output"].clone(),
        other => json!(other),
    }
}

/// Calls `tool` until the call was served with the tool cached.
async fn cache(app: &TestApp, tool: &str) {
    until("the tool to be cached", || async {
        assert_eq!(output(app, ACCOUNT_A, tool, json!({})).await, "v1");
        !app.state.tools().is_empty()
    })
    .await;
}

/// A new bundle and a stricter schema for `tool`, through `app`.
async fn change(app: &TestApp, tool: &str) {
    let schema = json!({"type": "object", "required": ["q"]});
    let patched = app
        .call(
            Method::PATCH,
            &format!("/accounts/me/tools/{tool}"),
            ACCOUNT_A,
            Some(json!({"bundle": b64(V2), "inputSchema": schema})),
        )
        .await;
    assert_eq!(
        patched.status,
        200,
        "{}",
        String::from_utf8_lossy(&patched.body)
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_change_reaches_the_next_call_on_the_server_that_made_it(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "versioned", V1, json!({"type": "object"}))
        .await;
    cache(&app, &tool).await;
    assert_eq!(
        output(&app, ACCOUNT_B, &tool, json!({})).await,
        404,
        "another account's cached tool is not found"
    );

    change(&app, &tool).await;
    assert_eq!(
        output(&app, ACCOUNT_A, &tool, json!({})).await,
        422,
        "the new schema"
    );
    assert_eq!(output(&app, ACCOUNT_A, &tool, json!({"q": 1})).await, "v2");

    let deleted = app
        .call(
            Method::DELETE,
            &format!("/accounts/me/tools/{tool}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(deleted.status, 204);
    assert_eq!(output(&app, ACCOUNT_A, &tool, json!({"q": 1})).await, 404);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_change_made_on_another_server_reaches_this_ones_calls(pool: PgPool) {
    let bundles_dir = tempfile::tempdir().unwrap();
    let bundles = fs_store(bundles_dir.path()).await;
    let spawn = |pool: PgPool, bundles: Arc<_>| async move {
        TestApp::builder(pool)
            .serve()
            .bundles(bundles)
            .spawn()
            .await
    };
    let changing = spawn(pool.clone(), bundles.clone()).await;
    let calling = spawn(pool, bundles).await;
    let tool = changing
        .upload(ACCOUNT_A, "versioned", V1, json!({"type": "object"}))
        .await;
    cache(&calling, &tool).await;

    change(&changing, &tool).await;
    until("the other server's call to run the new version", || async {
        output(&calling, ACCOUNT_A, &tool, json!({"q": 1})).await == "v2"
    })
    .await;
    assert_eq!(output(&calling, ACCOUNT_A, &tool, json!({})).await, 422);

    let deleted = changing
        .call(
            Method::DELETE,
            &format!("/accounts/me/tools/{tool}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(deleted.status, 204);
    until("the other server to find the tool gone", || async {
        output(&calling, ACCOUNT_A, &tool, json!({"q": 1})).await == 404
    })
    .await;
}
