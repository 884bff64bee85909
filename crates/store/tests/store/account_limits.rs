//! An account's limit overrides (each write announced to every process),
//! what admission counts against them (unfinished detached turns, working
//! MCP tasks), and the runner usage added up per period.

use std::time::Duration;

use serde_json::json;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use time::{Date, Month};
use toolserver_domain::{AccountId, LimitOverrides, TurnStatus};
use toolserver_store::account_limits::{self, CHANNEL};
use toolserver_store::account_usage::{self, RunnerUse};
use toolserver_store::async_results::{self, AsyncOutcome};
use toolserver_store::async_turns::{self, Committed, RunCommit, RunEnd};
use toolserver_store::mcp_tasks::{self, NewTask};

use crate::support::{register_n, start_turn_on, tenant, Tenant, Turn};

async fn announced(listener: &mut PgListener) -> String {
    let next = tokio::time::timeout(Duration::from_secs(5), listener.recv()).await;
    next.expect("no announcement").unwrap().payload().to_owned()
}

#[sqlx::test(migrations = "../../migrations")]
async fn overrides_are_replaced_whole_cleared_and_announced(pool: PgPool) {
    let account = AccountId::parse("acct-new").unwrap();
    let mut listener = PgListener::connect_with(&pool).await.unwrap();
    listener.listen(CHANNEL).await.unwrap();
    assert_eq!(
        account_limits::get(&pool, &account).await.unwrap(),
        LimitOverrides::default()
    );

    let two_calls = LimitOverrides {
        concurrent_calls: Some(2),
        ..LimitOverrides::default()
    };
    account_limits::put(&pool, &account, &two_calls)
        .await
        .unwrap();
    assert_eq!(announced(&mut listener).await, "acct-new");
    assert_eq!(
        account_limits::get(&pool, &account).await.unwrap(),
        two_calls
    );
    let (stored,): (serde_json::Value,) =
        sqlx::query_as("SELECT overrides FROM account_limits WHERE account_id = 'acct-new'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(stored, json!({"concurrentCalls": 2}));

    let three_turns = LimitOverrides {
        open_turns: Some(3),
        ..LimitOverrides::default()
    };
    account_limits::put(&pool, &account, &three_turns)
        .await
        .unwrap();
    assert_eq!(announced(&mut listener).await, "acct-new");
    assert_eq!(
        account_limits::get(&pool, &account).await.unwrap(),
        three_turns
    );

    account_limits::clear(&pool, &account).await.unwrap();
    assert_eq!(announced(&mut listener).await, "acct-new");
    assert_eq!(
        account_limits::get(&pool, &account).await.unwrap(),
        LimitOverrides::default()
    );
}

/// Commits `turn`'s start job as `end`.
async fn commit(pool: &PgPool, tenant: &Tenant, turn: &Turn, conversation: &str, end: RunEnd<'_>) {
    let commit = RunCommit {
        account: &tenant.account,
        conversation_id: conversation,
        job: &turn.job,
        end,
        reply: None,
    };
    let committed = async_turns::commit_run(pool, commit).await.unwrap();
    assert!(matches!(committed, Committed::Turn(_)), "{committed:?}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn pending_detached_counts_the_running_and_waiting_turns_of_the_account(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let other = tenant(&pool, "acct-b").await;
    let _running = start_turn_on(&pool, &owner, "conv-1").await;
    let waiting = start_turn_on(&pool, &owner, "conv-2").await;
    register_n(&pool, &owner, &waiting, 1).await;
    commit(&pool, &owner, &waiting, "conv-2", RunEnd::Skipped).await;
    let completed = start_turn_on(&pool, &owner, "conv-3").await;
    commit(
        &pool,
        &owner,
        &completed,
        "conv-3",
        RunEnd::Finished(&json!([])),
    )
    .await;
    let failed = start_turn_on(&pool, &owner, "conv-4").await;
    async_turns::fail(&pool, failed.id, "gone").await.unwrap();
    start_turn_on(&pool, &other, "conv-1").await;

    let statuses: Vec<(TurnStatus,)> =
        sqlx::query_as("SELECT status FROM async_turns WHERE account_id = 'acct-a' ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    let statuses: Vec<TurnStatus> = statuses.into_iter().map(|(s,)| s).collect();
    assert_eq!(
        statuses,
        [
            TurnStatus::Running,
            TurnStatus::Waiting,
            TurnStatus::Completed,
            TurnStatus::Failed
        ]
    );
    let counted = account_limits::pending_detached(&pool, &owner.account).await;
    assert_eq!(counted.unwrap(), 2);
    let counted = account_limits::pending_detached(&pool, &other.account).await;
    assert_eq!(counted.unwrap(), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn open_mcp_tasks_counts_the_working_tasks_of_the_account(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let other = tenant(&pool, "acct-b").await;
    let task = NewTask {
        tool_id: owner.tool,
        tool_name: "echo".into(),
        input: json!({}),
        token_sha256: [7; 32],
        ttl: Duration::from_secs(600),
        liveness_timeout: Duration::from_secs(60),
        poll_interval: Duration::from_secs(1),
    };
    for _ in 0..2 {
        mcp_tasks::insert(&pool, &owner.account, &task)
            .await
            .unwrap();
    }
    let settled = mcp_tasks::insert(&pool, &owner.account, &task)
        .await
        .unwrap();
    let outcome = AsyncOutcome::Completed(json!(1));
    async_results::settle(&pool, settled, &outcome)
        .await
        .unwrap();
    let turn = start_turn_on(&pool, &owner, "conv-1").await;
    register_n(&pool, &owner, &turn, 1).await;

    let counted = account_limits::open_mcp_tasks(&pool, &owner.account).await;
    assert_eq!(counted.unwrap(), 2);
    let counted = account_limits::open_mcp_tasks(&pool, &other.account).await;
    assert_eq!(counted.unwrap(), 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn usage_adds_up_per_account_and_period(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let unknown = AccountId::parse("acct-unknown").unwrap();
    let may = Date::from_calendar_date(2026, Month::May, 1).unwrap();
    let june = Date::from_calendar_date(2026, Month::June, 1).unwrap();
    let used = RunnerUse {
        cpu_ms: 10,
        egress_bytes: 100,
    };

    for _ in 0..2 {
        account_usage::add(&pool, &owner.account, may, used)
            .await
            .unwrap();
    }
    account_usage::add(&pool, &unknown, may, used)
        .await
        .unwrap();

    assert_eq!(
        account_usage::get(&pool, &owner.account, may)
            .await
            .unwrap(),
        RunnerUse {
            cpu_ms: 20,
            egress_bytes: 200
        }
    );
    assert_eq!(
        account_usage::get(&pool, &owner.account, june)
            .await
            .unwrap(),
        RunnerUse::default()
    );
    let (rows,): (i64,) = sqlx::query_as("SELECT count(*) FROM account_usage")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 1, "usage of an unknown account was stored");
}
