//! The tool-call ledger: inline attempts started and ended once, a detached
//! call's attempts kept by triggers through relaunches and settlement, the
//! attempts of dead processes ended `server_lost`, and retention.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_domain::{AttemptStatus, CallPath, Sha256Digest};
use toolserver_store::async_results::{self, AsyncOutcome, LostRunners};
use toolserver_store::tool_calls::{
    self, AttemptEnd, AttemptFilter, AttemptRow, NewAttempt, Payload,
};
use uuid::Uuid;

use crate::support::{call, exec, live_process, register, start_turn, tenant, Tenant};

fn attempt(tenant: &Tenant, process: Option<Uuid>) -> NewAttempt {
    NewAttempt {
        id: Uuid::now_v7(),
        account: tenant.account.clone(),
        subject: Some("user-1".into()),
        path: CallPath::Invoke,
        agent_id: None,
        conversation_id: None,
        turn_id: None,
        step: None,
        seq: None,
        tool_call_id: Some("call-1".into()),
        tool_name: "echo".into(),
        tool_id: Some(tenant.tool.as_uuid()),
        tool_version: Some(1),
        bundle_sha256: Some(Sha256Digest::of(b"bundle").to_hex()),
        attempt: 1,
        payload_limit: 4,
        input: Payload::of(r#"{"q":"hello"}"#, 4),
        idempotency_key: Some("key-1".into()),
        trace_id: None,
        process_id: process,
        queued_at: OffsetDateTime::now_utc(),
        started_at: OffsetDateTime::now_utc(),
    }
}

fn end(id: Uuid, status: AttemptStatus) -> AttemptEnd {
    AttemptEnd {
        id,
        status,
        output: Some(Payload::of("\"done\"", 4)),
        error: None,
        ended_at: OffsetDateTime::now_utc(),
    }
}

fn running(started: &NewAttempt) -> AttemptRow {
    AttemptRow {
        start: started.clone(),
        end: None,
    }
}

async fn attempts_of(pool: &PgPool, tenant: &Tenant) -> Vec<tool_calls::AttemptRecord> {
    let filter = AttemptFilter::default();
    let mut rows = tool_calls::list(pool, &tenant.account, &filter, None, 100)
        .await
        .unwrap();
    rows.sort_by_key(|row| (row.tool_call_id.clone(), row.attempt));
    rows
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_inline_attempt_keeps_its_first_end(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let started = attempt(&tenant, None);
    tool_calls::record(&pool, &[running(&started)])
        .await
        .unwrap();
    let row = tool_calls::get(&pool, &tenant.account, started.id)
        .await
        .unwrap();
    assert_eq!(row.status, "running");
    assert_eq!(row.input.as_deref(), Some(r#"{"q""#));
    assert_eq!(row.input_bytes, Some(13));
    assert_eq!(row.subject.as_deref(), Some("user-1"));

    tool_calls::end(&pool, &[end(started.id, AttemptStatus::Ok)])
        .await
        .unwrap();
    tool_calls::end(&pool, &[end(started.id, AttemptStatus::Cancelled)])
        .await
        .unwrap();
    let row = tool_calls::get(&pool, &tenant.account, started.id)
        .await
        .unwrap();
    assert_eq!(row.status, "ok");
    assert_eq!(row.output.as_deref(), Some("\"don"));
    assert!(row.ended_at.is_some());

    let other = crate::support::tenant(&pool, "acct-b").await;
    let hidden = tool_calls::get(&pool, &other.account, started.id).await;
    assert!(matches!(
        hidden,
        Err(toolserver_store::StoreError::NotFound)
    ));
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_attempt_that_ended_before_it_was_written_is_one_finished_row(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let started = attempt(&tenant, None);
    let ended = AttemptEnd {
        ended_at: started.started_at + time::Duration::milliseconds(7),
        ..end(started.id, AttemptStatus::Ok)
    };
    let row = AttemptRow {
        start: started.clone(),
        end: Some(ended),
    };
    let running_too = attempt(&tenant, None);
    tool_calls::record(&pool, &[row, running(&running_too)])
        .await
        .unwrap();

    let done = tool_calls::get(&pool, &tenant.account, started.id)
        .await
        .unwrap();
    assert_eq!(done.status, "ok");
    assert_eq!(done.output.as_deref(), Some("\"don"));
    assert_eq!(done.output_bytes, Some(6));
    let took = done.ended_at.unwrap() - done.started_at;
    assert_eq!(took, time::Duration::milliseconds(7));
    let open = tool_calls::get(&pool, &tenant.account, running_too.id)
        .await
        .unwrap();
    assert_eq!(open.status, "running");
    assert_eq!(open.ended_at, None);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_dead_processs_attempts_end_server_lost(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let alive = live_process(&pool).await;
    let (dead, live) = (
        attempt(&tenant, Some(Uuid::now_v7())),
        attempt(&tenant, Some(alive)),
    );
    tool_calls::record(&pool, &[running(&dead), running(&live)])
        .await
        .unwrap();

    let young = tool_calls::sweep_lost(&pool, Duration::from_secs(60), 10).await;
    assert_eq!(
        young.unwrap(),
        0,
        "an attempt younger than the grace is spared"
    );
    let swept = tool_calls::sweep_lost(&pool, Duration::ZERO, 10)
        .await
        .unwrap();
    assert_eq!(swept, 1);
    let lost = tool_calls::get(&pool, &tenant.account, dead.id)
        .await
        .unwrap();
    assert_eq!(lost.status, "server_lost");
    assert!(lost.error.unwrap().contains("may have run"));
    let running = tool_calls::get(&pool, &tenant.account, live.id)
        .await
        .unwrap();
    assert_eq!(running.status, "running");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_detached_calls_attempts_follow_its_relaunch_and_settlement(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let mut safe = call(&tenant, "safe");
    safe.safe_to_repeat = true;
    let ids = register(&pool, &tenant, &turn, &[call(&tenant, "unsafe"), safe]).await;
    let rows = attempts_of(&pool, &tenant).await;
    assert_eq!(rows.len(), 2);
    assert!(rows
        .iter()
        .all(|row| row.status == "running" && row.path == "detached"));
    assert!(rows
        .iter()
        .all(|row| row.turn_id == Some(turn.id.to_string())));
    assert!(rows
        .iter()
        .all(|row| row.agent_id == Some(tenant.agent.as_uuid())));

    let silent = "UPDATE async_tool_results SET alive_until = now() - interval '1 second' \
                  WHERE id = $1";
    exec(&pool, silent, ids[0]).await;
    exec(&pool, silent, ids[1]).await;
    let liveness = Duration::from_secs(60);
    async_results::relaunch_lost_runners(&pool, LostRunners::Silent, 3, liveness, 10)
        .await
        .unwrap();
    async_results::fail_lost_runners(&pool, LostRunners::Silent, 3, 10)
        .await
        .unwrap();
    let outcome = AsyncOutcome::Completed(json!({"done": true}));
    async_results::settle(&pool, ids[1], &outcome)
        .await
        .unwrap();

    let rows = attempts_of(&pool, &tenant).await;
    let seen: Vec<(Option<&str>, i32, &str)> = rows
        .iter()
        .map(|row| {
            (
                row.tool_call_id.as_deref(),
                row.attempt,
                row.status.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (Some("safe"), 1, "runner_lost"),
            (Some("safe"), 2, "ok"),
            (Some("unsafe"), 1, "runner_lost"),
        ]
    );
    let done = &rows[1];
    let whole = json!({"done": true}).to_string();
    assert_eq!(done.output.as_deref(), Some(whole.as_str()));
    assert_eq!(done.output_bytes, Some(whole.len() as i64));
    assert_eq!(
        done.idempotency_key, rows[0].idempotency_key,
        "one key for every launch"
    );
    assert_eq!(
        done.result_id,
        Some(uuid::Uuid::parse_str(&ids[1].to_string()).unwrap())
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn retention_drops_payloads_before_rows(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let (old, recent) = (attempt(&tenant, None), attempt(&tenant, None));
    tool_calls::record(&pool, &[running(&old), running(&recent)])
        .await
        .unwrap();
    tool_calls::end(
        &pool,
        &[
            end(old.id, AttemptStatus::Ok),
            end(recent.id, AttemptStatus::Ok),
        ],
    )
    .await
    .unwrap();
    exec(
        &pool,
        "UPDATE tool_calls SET ended_at = now() - interval '2 days' WHERE id = $1",
        old.id,
    )
    .await;
    let day = Duration::from_secs(86_400);
    let pruned = tool_calls::prune(&pool, day, 3 * day, 10).await.unwrap();
    assert_eq!(pruned, (1, 0));
    let stripped = tool_calls::get(&pool, &tenant.account, old.id)
        .await
        .unwrap();
    assert_eq!((stripped.input, stripped.output), (None, None));
    assert_eq!(stripped.input_bytes, Some(13));
    assert!(stripped.payloads_pruned_at.is_some());
    let kept = tool_calls::get(&pool, &tenant.account, recent.id)
        .await
        .unwrap();
    assert!(kept.input.is_some());

    let pruned = tool_calls::prune(&pool, day, day, 10).await.unwrap();
    assert_eq!(pruned, (0, 1));
    assert!(tool_calls::get(&pool, &tenant.account, old.id)
        .await
        .is_err());
    assert!(tool_calls::get(&pool, &tenant.account, recent.id)
        .await
        .is_ok());
}
