//! A turn's start: its lease and the request's message, written without
//! waiting for the disk, on connections the pool hands on unchanged.

use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use toolserver_store::conversation_messages::MessageTail;
use toolserver_store::conversations;

use crate::support::{conversation_holder, lease, live_process, tenant};

/// The pool's one connection, after a turn's start wrote on it, still
/// waits for the disk on commit: only the turn's own writes skip the wait.
#[sqlx::test(migrations = "../../migrations")]
async fn a_turns_start_leaves_its_connection_committing_durably(pool: PgPool) {
    let single = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(pool.connect_options().as_ref().clone())
        .await
        .unwrap();
    let tenant = tenant(&single, "acme").await;
    let process = live_process(&single).await;
    let holder = lease(&single, &tenant, &tenant.conversation, process).await;
    let messages = [json!({"id": "u1", "role": "user", "parts": []})];
    conversations::save(
        &single,
        &tenant.account,
        &tenant.conversation,
        holder,
        &MessageTail::whole(&messages),
    )
    .await
    .unwrap();

    let (setting,): (String,) = sqlx::query_as("SHOW synchronous_commit")
        .fetch_one(&single)
        .await
        .unwrap();
    assert_eq!(setting, "on");
    assert_eq!(
        conversation_holder(&pool, &tenant, &tenant.conversation).await,
        Some(holder),
        "the lease is visible to every other connection"
    );
    let stored = conversations::get(&pool, &tenant.account, &tenant.conversation)
        .await
        .unwrap();
    assert_eq!(stored.messages, messages);
}
