//! Limits on turns: open turns and the turn rate, and pending detached
//! turns, refused at their limits while work already admitted passes.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_domain::AccountLimits;
use toolserver_testsupport::Reply;

use crate::detached::wait_for_status;
use crate::support::*;

use super::{
    app_with, assert_refused, generous, limit_in_use, put_limits, send, until_in_use, usage,
};

#[sqlx::test(migrations = "../../migrations")]
async fn open_turns_and_the_turn_rate_are_refused_at_their_limits(pool: PgPool) {
    let app = app_with(
        pool,
        AccountLimits {
            open_turns: 1,
            ..generous()
        },
    )
    .await;
    app.model.script(
        "held",
        vec![Reply::text("slowly").delay_first(Duration::from_millis(1500))],
    );
    let agent = app.agent(ACCOUNT_A, "held", json!({})).await;
    let held = app
        .start_turn(ACCOUNT_A, &agent, user_turn("conv-held", "hi"))
        .await;
    assert_eq!(held.status(), 200);
    let second = send(
        &app,
        reqwest::Method::POST,
        &format!("/agents/{agent}/chat"),
        &token(ACCOUNT_A),
        Some(user_turn("conv-other", "hi")),
    )
    .await;
    assert_refused(second, "openTurns", 1).await;
    assert_eq!(
        limit_in_use(&usage(&app, ACCOUNT_A).await, "openTurns"),
        (1, 1)
    );
    let text = held.text().await.unwrap();
    assert!(text.contains("slowly"), "the admitted turn ran: {text}");
    until_in_use(&app, ACCOUNT_A, "openTurns", 0).await;

    let raised = put_limits(
        &app,
        ACCOUNT_A,
        json!({"turnsPerMinute": 1, "turnBurst": 1}),
    )
    .await;
    assert_eq!(raised.status(), 200);
    app.model.script("quick", vec![Reply::text("one")]);
    let quick = app.agent(ACCOUNT_A, "quick", json!({})).await;
    let turn = app
        .turn(ACCOUNT_A, &quick, user_turn("conv-q1", "hi"))
        .await;
    assert_eq!(turn.text(), "one");
    let again = send(
        &app,
        reqwest::Method::POST,
        &format!("/agents/{quick}/chat"),
        &token(ACCOUNT_A),
        Some(user_turn("conv-q2", "hi")),
    )
    .await;
    assert_refused(again, "turnsPerMinute", 1).await;
}

/// A detached job that heartbeats, then posts its result a second later.
const JOB: &str = "export default { async execute(ctx, input) { await ctx.asyncTool.heartbeat({ step: 1 }); await new Promise(r => setTimeout(r, 1000)); return { finished: input.job }; } };";

#[sqlx::test(migrations = "../../migrations")]
async fn detached_turns_are_refused_at_their_limit_and_admitted_work_passes_at_any_limit(
    pool: PgPool,
) {
    let app = app_with(
        pool,
        AccountLimits {
            pending_detached: 1,
            ..generous()
        },
    )
    .await;
    let job = app
        .upload(ACCOUNT_A, "job", JOB, json!({"type": "object"}))
        .await;
    app.model.script(
        "detached",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "a"})),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("Finished."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "detached", json!({ &job: {"async": true} }))
        .await;
    let (status, accepted) = app
        .request(
            reqwest::Method::POST,
            &format!("/agents/{agent}/async"),
            ACCOUNT_A,
            Some(user_turn("conv-a", "go")),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let id = accepted["statusId"].as_str().unwrap().to_owned();
    let second = send(
        &app,
        reqwest::Method::POST,
        &format!("/agents/{agent}/async"),
        &token(ACCOUNT_A),
        Some(user_turn("conv-b", "go")),
    )
    .await;
    assert_refused(second, "pendingDetached", 1).await;

    // Every admission limit at zero: nothing new is admitted, but the
    // running turn's heartbeat, completion and continuation still pass.
    // (`liveRunners` is the runner budget's, not admission's: a turn's tool
    // call waits for a runner like any call.)
    let zero = json!({
        "concurrentCalls": 0, "openTurns": 0, "pendingDetached": 0,
        "mcpTasks": 0, "callsPerMinute": 0, "callBurst": 0, "turnsPerMinute": 0, "turnBurst": 0,
    });
    assert_eq!(put_limits(&app, ACCOUNT_A, zero).await.status(), 200);
    assert_refused(
        app.invoke_response(ACCOUNT_A, &job, json!({"input": {"job": "x"}}))
            .await,
        "callsPerMinute",
        0,
    )
    .await;
    let done = wait_for_status(&app, &id, "completed").await;
    let text = done["messages"].to_string();
    assert!(text.contains("Finished."), "{text}");
    assert!(text.contains("\"finished\":\"a\""), "{text}");
    assert_eq!(app.model.request_count("detached"), 3);
}
