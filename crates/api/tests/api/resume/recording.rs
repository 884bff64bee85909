//! How turn streams are recorded: with recording off nothing is
//! resumable, concurrent turns under a commit delay are each recorded whole
//! and in order, and a recorder lingers for the rest of a burst.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::{fast_lifecycle, TestApp};
use crate::support::*;

use super::{ms_schema, resume, stop, tool_then_text, types, Frames, SLOW};

#[sqlx::test(migrations = "../../migrations")]
async fn with_recording_off_turns_stream_straight_and_nothing_is_resumable(pool: PgPool) {
    let mut settings = fast_lifecycle();
    settings.streams.record = false;
    let app = TestApp::live(pool.clone()).harness(settings).spawn().await;
    let tool = app.upload(ACCOUNT_A, "slow", SLOW, ms_schema()).await;
    let agent = tool_then_text(
        &app,
        "unrecorded",
        (&tool, "slow"),
        json!({"ms": 500}),
        json!({}),
    )
    .await;
    let mut first = Frames::new(
        app.start_turn(ACCOUNT_A, &agent, user_turn("conv-u", "go"))
            .await,
    );
    first.until("tool-input-available").await;
    assert_eq!(resume(&app, &agent, "conv-u", "").await.status(), 204);
    assert_eq!(stop(&app, ACCOUNT_A, &agent, "conv-u").await.0, 204);
    let chunks = first.read_to_end().await;
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM turn_streams")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(recorded, 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn under_a_commit_delay_concurrent_turns_are_each_recorded_whole_and_in_order(pool: PgPool) {
    // Every write waits for others to join it: turns share statements.
    let mut settings = fast_lifecycle();
    settings.streams.commit_siblings = 0;
    settings.streams.commit_delay = Duration::from_millis(5);
    let app = TestApp::live(pool).harness(settings).spawn().await;
    app.model.script(
        "grouped",
        vec![Reply::text(&"word ".repeat(30)).chunk_delay(Duration::from_millis(1))],
    );
    let agent = app.agent(ACCOUNT_A, "grouped", json!({})).await;
    let turns = futures::future::join_all((0..8).map(|n| {
        let (app, agent) = (&app, &agent);
        async move {
            let conversation = format!("conv-g{n}");
            let turn = app
                .turn(ACCOUNT_A, agent, user_turn(&conversation, "talk"))
                .await;
            (conversation, turn)
        }
    }))
    .await;
    for (conversation, turn) in turns {
        assert_eq!(turn.status, 200, "{}", turn.body);
        let (recorded, _) = recorded_chunks_and_rows(&app.pool, ACCOUNT_A, &conversation).await;
        assert_eq!(recorded, turn.chunks, "{conversation}");
    }
}

/// The chunks recorded for `account`'s conversation, in order, and in how
/// many batch rows.
async fn recorded_chunks_and_rows(
    pool: &PgPool,
    account: &str,
    conversation: &str,
) -> (Vec<Value>, usize) {
    let batches: Vec<(Vec<String>,)> = sqlx::query_as(
        "SELECT b.chunks FROM turn_stream_batches b JOIN turn_streams s ON s.id = b.stream_id \
         WHERE s.account_id = $1 AND s.conversation_id = $2 ORDER BY b.first_idx",
    )
    .bind(account)
    .bind(conversation)
    .fetch_all(pool)
    .await
    .unwrap();
    let chunks = batches
        .iter()
        .flat_map(|(chunks,)| {
            chunks
                .iter()
                .map(|chunk| serde_json::from_str(chunk).unwrap())
        })
        .collect();
    (chunks, batches.len())
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_recorder_lingers_for_the_rest_of_a_burst_after_its_first_batch_or_when_busy(
    pool: PgPool,
) {
    // One turn at a time; the text comes a chunk per ms. With no siblings
    // needed, every stream counts as a busy server's.
    let mut settings = fast_lifecycle();
    settings.streams.commit_delay = Duration::ZERO;
    let idle = settings.streams.commit_siblings;
    for (linger, siblings, conversation, expected_rows) in [
        (Duration::ZERO, idle, "conv-eager", None),
        (Duration::from_secs(5), idle, "conv-linger", Some(2)),
        (Duration::from_secs(5), 0, "conv-busy", Some(1)),
    ] {
        settings.streams.linger = linger;
        settings.streams.commit_siblings = siblings;
        let app = TestApp::live(pool.clone())
            .harness(settings.clone())
            .spawn()
            .await;
        app.model.script(
            "bursty",
            vec![Reply::text(&"word ".repeat(20)).chunk_delay(Duration::from_millis(1))],
        );
        let agent = app.agent(ACCOUNT_A, "bursty", json!({})).await;
        let turn = app
            .turn(ACCOUNT_A, &agent, user_turn(conversation, "talk"))
            .await;
        assert_eq!(turn.status, 200, "{}", turn.body);
        let (recorded, rows) = recorded_chunks_and_rows(&app.pool, ACCOUNT_A, conversation).await;
        assert_eq!(recorded, turn.chunks, "{conversation}");
        match expected_rows {
            None => assert!(
                rows > 2,
                "without a linger the chunks take many appends: {rows} rows"
            ),
            Some(expected) => assert_eq!(
                rows, expected,
                "{conversation}: idle, the first batch is written at once and the rest lingers into the end's write; busy, the whole turn does"
            ),
        }
    }
}
