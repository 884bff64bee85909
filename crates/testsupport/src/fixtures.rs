//! Rows the lifecycle's tests and benchmarks hang work on.

use sqlx::PgPool;
use uuid::Uuid;

/// Inserts `account` (if new), an agent and a detached turn of it (no run,
/// no conversation) and returns the turn id.
///
/// # Panics
/// When a row cannot be written (the migrations must have run).
pub async fn detached_turn(pool: &PgPool, account: &str) -> Uuid {
    let (agent, turn) = (Uuid::now_v7(), Uuid::now_v7());
    sqlx::query("INSERT INTO accounts (id) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(account)
        .execute(pool)
        .await
        .expect("insert the account");
    sqlx::query(
        "INSERT INTO agents (id, account_id, name, config) VALUES ($1, $2, 'fixture', '{}')",
    )
    .bind(agent)
    .bind(account)
    .execute(pool)
    .await
    .expect("insert the agent");
    sqlx::query(
        "INSERT INTO async_turns (id, account_id, agent_id, conversation_id) \
         VALUES ($1, $2, $3, 'conv-fixture')",
    )
    .bind(turn)
    .bind(account)
    .bind(agent)
    .execute(pool)
    .await
    .expect("insert the turn");
    turn
}
