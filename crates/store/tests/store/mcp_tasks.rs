//! MCP tasks: a detached call with no group, pending until its call settles
//! (continuing nothing), expired at its TTL by the reaper, readable only by
//! its account until then, and purged once settled past it.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_domain::{CallStatus, ResultId};
use toolserver_store::async_results::{self, AsyncOutcome, Settlement};
use toolserver_store::mcp_tasks::{self, ExpiredTask, NewTask};
use toolserver_store::StoreError;

use crate::support::{call_row, exec, register_n, start_turn, tenant, Tenant};

async fn insert(pool: &PgPool, tenant: &Tenant) -> ResultId {
    let task = NewTask {
        tool_id: tenant.tool,
        tool_name: "echo".into(),
        input: json!({"say": "hi"}),
        token_sha256: [7; 32],
        ttl: Duration::from_secs(600),
        liveness_timeout: Duration::from_secs(60),
        poll_interval: Duration::from_millis(1500),
    };
    mcp_tasks::insert(pool, &tenant.account, &task)
        .await
        .unwrap()
}

async fn outbox_rows(pool: &PgPool) -> i64 {
    let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM continuation_outbox")
        .fetch_one(pool)
        .await
        .unwrap();
    n
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_task_is_working_until_its_call_settles_and_continues_nothing(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let other = tenant(&pool, "acct-b").await;
    let id = insert(&pool, &owner).await;

    let task = mcp_tasks::get(&pool, &owner.account, id).await.unwrap();
    assert_eq!(task.status, CallStatus::Pending);
    assert_eq!(task.tool_id, Some(owner.tool.as_uuid()));
    assert_eq!((task.tool_name.as_str(), task.task_poll_ms), ("echo", 1500));
    assert!(task.response.is_none() && task.age_ms >= 0);
    let stored = call_row(&pool, id).await;
    assert_eq!(
        (stored.status, stored.group_id),
        (CallStatus::Pending, None)
    );
    assert_eq!(async_results::token_hash(&pool, id).await.unwrap(), [7; 32]);
    assert!(matches!(
        mcp_tasks::get(&pool, &other.account, id).await,
        Err(StoreError::NotFound)
    ));

    let outcome = AsyncOutcome::Completed(json!({"said": "hi"}));
    let settled = async_results::settle(&pool, id, &outcome).await.unwrap();
    assert_eq!(settled, Settlement::Settled { continued: false });
    let task = mcp_tasks::get(&pool, &owner.account, id).await.unwrap();
    assert_eq!(task.status, CallStatus::Completed);
    assert_eq!(task.response, Some(json!({"said": "hi"})));
    assert!(task.updated_at >= task.created_at);
    assert_eq!(outbox_rows(&pool).await, 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_call_of_a_turn_is_no_task(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let id = register_n(&pool, &tenant, &turn, 1).await[0];
    assert!(matches!(
        mcp_tasks::get(&pool, &tenant.account, id).await,
        Err(StoreError::NotFound)
    ));
    mcp_tasks::discard(&pool, &tenant.account, id)
        .await
        .unwrap();
    assert_eq!(call_row(&pool, id).await.status, CallStatus::Pending);
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_reaper_expires_tasks_working_at_their_deadline_and_no_turn_calls(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let due = insert(&pool, &tenant).await;
    let working = insert(&pool, &tenant).await;
    let turn = start_turn(&pool, &tenant).await;
    let turn_call = register_n(&pool, &tenant, &turn, 1).await[0];
    let past = "UPDATE async_tool_results SET expires_at = now() - interval '1 second' \
                WHERE id = $1";
    exec(&pool, past, due).await;
    exec(&pool, past, turn_call).await;

    let expired = mcp_tasks::expire_due(&pool, 10).await.unwrap();
    assert_eq!(
        expired,
        [ExpiredTask {
            id: due,
            account_id: "acct-a".into(),
            tool_id: Some(tenant.tool.as_uuid()),
        }]
    );
    let stored = call_row(&pool, due).await;
    assert_eq!(stored.status, CallStatus::Expired);
    assert!(stored.settled);
    assert_eq!(
        stored.error.as_deref(),
        Some("the task did not complete within its TTL")
    );
    assert_eq!(call_row(&pool, working).await.status, CallStatus::Pending);
    assert_eq!(call_row(&pool, turn_call).await.status, CallStatus::Pending);
    assert!(mcp_tasks::expire_due(&pool, 10).await.unwrap().is_empty());
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_settled_task_past_its_ttl_is_gone_and_then_purged(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let settled = insert(&pool, &tenant).await;
    let outcome = AsyncOutcome::Failed("no".into());
    async_results::settle(&pool, settled, &outcome)
        .await
        .unwrap();
    let working = insert(&pool, &tenant).await;
    let kept = insert(&pool, &tenant).await;
    async_results::settle(&pool, kept, &outcome).await.unwrap();
    let past = "UPDATE async_tool_results SET hard_expires_at = now() - interval '1 second' \
                WHERE id = $1";
    exec(&pool, past, settled).await;
    exec(&pool, past, working).await;

    assert!(matches!(
        mcp_tasks::get(&pool, &tenant.account, settled).await,
        Err(StoreError::NotFound)
    ));
    let task = mcp_tasks::get(&pool, &tenant.account, working)
        .await
        .unwrap();
    assert_eq!(task.status, CallStatus::Pending);

    assert_eq!(mcp_tasks::purge_expired(&pool, 10).await.unwrap(), 1);
    let left: Vec<(ResultId,)> = sqlx::query_as("SELECT id FROM async_tool_results ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(left, [(working,), (kept,)]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn only_the_owning_account_discards_a_task(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let other = tenant(&pool, "acct-b").await;
    let id = insert(&pool, &owner).await;

    mcp_tasks::discard(&pool, &other.account, id).await.unwrap();
    assert_eq!(call_row(&pool, id).await.status, CallStatus::Pending);
    mcp_tasks::discard(&pool, &owner.account, id).await.unwrap();
    let (left,): (i64,) = sqlx::query_as("SELECT count(*) FROM async_tool_results")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
}
