//! Heartbeats of detached calls: a tool that beats outlives its heartbeat
//! timeout, one that stops expires, and the heartbeat route's answers.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_domain::ResultId;
use toolserver_store::async_results;
use toolserver_testsupport::Reply;
use uuid::Uuid;

use crate::app::{spawn_live_app, TestApp};
use crate::completion::turn_fixture;
use crate::detached::{start_async, wait_for_status, wait_for_status_within};

use super::{account, async_agent, text_of};

/// Sends `beats` heartbeats `every` ms apart, then returns.
const HEARTBEATING: &str = "export default { async execute(ctx, input) { for (let i = 0; i < input.beats; i++) { await new Promise(r => setTimeout(r, input.every)); await ctx.asyncTool.heartbeat({ beat: i + 1 }); } return { beats: input.beats }; } };";

/// Sends two heartbeats, then goes quiet for a minute.
const GOES_QUIET: &str = "export default { async execute(ctx) { await ctx.asyncTool.heartbeat({ beat: 1 }); await new Promise(r => setTimeout(r, 300)); await ctx.asyncTool.heartbeat({ beat: 2 }); await new Promise(r => setTimeout(r, 60000)); return 'late'; } };";

#[sqlx::test(migrations = "../../migrations")]
async fn a_tool_that_heartbeats_outlives_its_heartbeat_timeout(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let (_, agent) = async_agent(
        &app,
        ("beats", HEARTBEATING),
        "heartbeats",
        json!({"heartbeatTimeoutSeconds": 5, "timeoutSeconds": 120}),
        vec![
            Reply::tool_call("c1", "beats", json!({"beats": 30, "every": 1000})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text("Finished."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-heartbeats", "go").await;
    wait_for_status(&app, &id, "waiting").await;
    let (result_id,): (ResultId,) = sqlx::query_as("SELECT id FROM async_tool_results")
        .fetch_one(&pool)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let record = async_results::get(&pool, &account(), result_id)
        .await
        .unwrap();
    assert_eq!(record.status, toolserver_domain::CallStatus::Pending);
    assert!(record.progress.unwrap()["beat"].as_u64().unwrap() >= 5);
    assert!(record.last_heartbeat_at.is_some());
    let done = wait_for_status_within(&app, &id, "completed", Duration::from_secs(40)).await;
    let text = text_of(&done["messages"]);
    assert!(
        text.contains("\"beats\":30") && text.contains("Finished."),
        "{done}"
    );
    assert_eq!(app.model.request_count("heartbeats"), 3);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_tool_that_stops_heartbeating_expires_and_its_group_continues_once(pool: PgPool) {
    let app = spawn_live_app(pool.clone()).await;
    let (_, agent) = async_agent(
        &app,
        ("quiet", GOES_QUIET),
        "goes-quiet",
        json!({"heartbeatTimeoutSeconds": 2}),
        vec![
            Reply::tool_call("c1", "quiet", json!({})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text("It went quiet."),
        ],
    )
    .await;
    let id = start_async(&app, &agent, "conv-goes-quiet", "go").await;
    let done = wait_for_status(&app, &id, "completed").await;
    let (settled_after,): (f64,) = sqlx::query_as(
        "SELECT EXTRACT(EPOCH FROM settled_at - last_heartbeat_at)::float8 FROM async_tool_results",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        (2.0..2.0 + 1.0).contains(&settled_after),
        "expired {settled_after} s after the last heartbeat (timeout 2 s, reaper 50 ms)"
    );
    let text = text_of(&done["messages"]);
    assert!(
        text.contains("expired") && text.contains("It went quiet."),
        "{done}"
    );
    assert_eq!(
        app.model.request_count("goes-quiet"),
        3,
        "the group continues once"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_heartbeat_route_answers_each_case(pool: PgPool) {
    let app = TestApp::live(pool.clone()).quiet().spawn().await;
    let turn = turn_fixture(&pool).await;
    let token = "t".repeat(64);
    let call = |ttl: Duration| async_results::NewAsyncResult {
        tool_call_id: "c".into(),
        tool_id: None,
        tool_name: "beats".into(),
        token_sha256: <sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()).into(),
        ttl,
        heartbeat_timeout: Some(Duration::from_secs(5)),
        liveness_timeout: Duration::from_secs(10),
        input: json!({}),
        safe_to_repeat: false,
    };
    let owner = async_results::PassOwner {
        turn_id: turn,
        job_id: Uuid::now_v7(),
    };
    let calls = [
        call(Duration::from_secs(60)),
        call(Duration::ZERO),
        call(Duration::from_secs(60)),
    ];
    let ids = async_results::register_pass(&pool, &account(), owner, &calls)
        .await
        .unwrap();
    let (live, expired, other) = (ids[0], ids[1], ids[2]);
    let beat = |id: ResultId, token: Option<String>, body: Value| {
        let request = app
            .client
            .post(format!("{}/sandbox-jobs/{id}/heartbeat", app.base()))
            .json(&body);
        let request = match token {
            Some(token) => request.header("x-job-token", token),
            None => request,
        };
        async move {
            let response = request.send().await.unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    let (status, body) = beat(live, Some(token.clone()), json!({"progress": {"pct": 40}})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "pending");
    let record = async_results::get(&pool, &account(), live).await.unwrap();
    assert_eq!(record.progress, Some(json!({"pct": 40})));
    let first_deadline = record.expires_at;
    let (status, _) = beat(live, Some(token.clone()), json!({"liveness": true})).await;
    assert_eq!(status, 200);
    let record = async_results::get(&pool, &account(), live).await.unwrap();
    assert_eq!(
        record.expires_at, first_deadline,
        "a liveness ping moves no deadline"
    );
    assert_eq!(record.progress, Some(json!({"pct": 40})));
    assert_eq!(beat(live, None, json!({})).await.0, 401);
    assert_eq!(beat(live, Some("x".repeat(64)), json!({})).await.0, 403);
    assert_eq!(
        beat(ResultId::generate(), Some(token.clone()), json!({}))
            .await
            .0,
        404
    );
    assert_eq!(
        beat(live, Some(token.clone()), json!({"speed": 1})).await.0,
        400,
        "unknown fields are refused"
    );
    async_results::settle(
        &pool,
        live,
        &async_results::AsyncOutcome::Completed(json!(1)),
    )
    .await
    .unwrap();
    assert_eq!(beat(live, Some(token.clone()), json!({})).await.0, 409);
    assert_eq!(beat(expired, Some(token.clone()), json!({})).await.0, 410);
    // Tenancy: the token is the only key, and it opens nothing else.
    assert_eq!(beat(other, Some("y".repeat(64)), json!({})).await.0, 403);
}
