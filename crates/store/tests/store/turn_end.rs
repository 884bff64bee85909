//! A chat turn's end: its conversation stored and released, and its
//! stream's end recorded, in one statement, each only for the turn that
//! still holds the conversation and the stream still at its count.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_domain::AccountId;
use toolserver_store::conversation_messages::MessageTail;
use toolserver_store::conversations;
use toolserver_store::turn_end::{self, TurnEnded};
use toolserver_store::turn_streams::{self, Append, Appended, Opening};
use toolserver_store::StoreError;
use uuid::Uuid;

use crate::support::{conversation_holder, lease, live_process, tenant, Tenant};

/// [`turn_end::store_and_release`] on a connection of `pool`.
async fn store_and_release(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    turn: Uuid,
    tail: &MessageTail,
    end: Option<&Append>,
) -> Result<TurnEnded, StoreError> {
    let mut conn = pool.acquire().await?;
    turn_end::store_and_release(&mut conn, account, id, turn, tail, end).await
}

/// Opens a stream on the tenant's conversation with one chunk.
async fn open_stream(pool: &PgPool, tenant: &Tenant) -> Uuid {
    let id = Uuid::now_v7();
    let first = Append {
        stream: id,
        from: 0,
        chunks: vec![json!({"type": "start"}).to_string()],
        finish: false,
        opening: Some(Opening {
            id,
            account: tenant.account.clone(),
            conversation_id: tenant.conversation.clone(),
            log_start: None,
            alive: Duration::from_secs(60),
        }),
    };
    turn_streams::append_many(pool, &[first]).await.unwrap();
    id
}

fn end_of(stream: Uuid, from: i32) -> Append {
    Append {
        stream,
        from,
        chunks: vec![json!({"type": "finish"}).to_string()],
        finish: true,
        opening: None,
    }
}

async fn stored_messages(pool: &PgPool, tenant: &Tenant) -> Value {
    let stored = conversations::get(pool, &tenant.account, &tenant.conversation)
        .await
        .unwrap();
    Value::Array(stored.messages)
}

#[sqlx::test(migrations = "../../migrations")]
async fn only_the_holder_stores_and_releases_the_conversation(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let other = tenant(&pool, "acct-b").await;
    let process = live_process(&pool).await;
    let holder = lease(&pool, &owner, "conv-1", process).await;
    let messages = [json!({"role": "user"}), json!({"role": "assistant"})];
    let tail = MessageTail::whole(&messages);

    for (account, turn) in [(&owner.account, Uuid::now_v7()), (&other.account, holder)] {
        let ended = store_and_release(&pool, account, "conv-1", turn, &tail, None);
        let expected = TurnEnded {
            stored: None,
            stream_end: None,
        };
        assert_eq!(ended.await.unwrap(), expected);
        assert_eq!(stored_messages(&pool, &owner).await, json!([]));
        assert_eq!(
            conversation_holder(&pool, &owner, "conv-1").await,
            Some(holder)
        );
    }

    let ended = store_and_release(&pool, &owner.account, "conv-1", holder, &tail, None);
    assert!(ended.await.unwrap().stored.is_some());
    assert_eq!(stored_messages(&pool, &owner).await, json!(messages));
    assert_eq!(conversation_holder(&pool, &owner, "conv-1").await, None);
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_stream_ends_with_the_conversation_stored(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let process = live_process(&pool).await;
    let holder = lease(&pool, &tenant, "conv-1", process).await;
    let stream = open_stream(&pool, &tenant).await;
    let messages = [json!({"role": "assistant"})];
    let tail = MessageTail::whole(&messages);

    let end = end_of(stream, 1);
    let ended = store_and_release(&pool, &tenant.account, "conv-1", holder, &tail, Some(&end));
    let ended = ended.await.unwrap();
    assert!(ended.stored.is_some());
    assert_eq!(
        ended.stream_end,
        Some(Appended::Recorded {
            stop_requested: false,
        })
    );
    let state = turn_streams::state(&pool, stream).await.unwrap();
    assert!(state.finished && state.chunk_count == 2, "{state:?}");
    assert_eq!(stored_messages(&pool, &tenant).await, json!(messages));
    assert_eq!(conversation_holder(&pool, &tenant, "conv-1").await, None);
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_end_at_the_wrong_count_is_refused_and_the_turn_still_stored(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let process = live_process(&pool).await;
    let holder = lease(&pool, &tenant, "conv-1", process).await;
    let stream = open_stream(&pool, &tenant).await;
    let messages = [json!({"role": "assistant"})];
    let tail = MessageTail::whole(&messages);

    let end = end_of(stream, 5);
    let ended = store_and_release(&pool, &tenant.account, "conv-1", holder, &tail, Some(&end));
    let ended = ended.await.unwrap();
    assert!(ended.stored.is_some());
    assert_eq!(ended.stream_end, Some(Appended::Refused));
    let state = turn_streams::state(&pool, stream).await.unwrap();
    assert!(!state.finished && state.chunk_count == 1, "{state:?}");
    assert_eq!(stored_messages(&pool, &tenant).await, json!(messages));
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_end_that_does_not_finish_the_stream_is_an_error_and_stores_nothing(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let process = live_process(&pool).await;
    let holder = lease(&pool, &tenant, "conv-1", process).await;
    let stream = open_stream(&pool, &tenant).await;
    let messages = [json!({"role": "assistant"})];
    let tail = MessageTail::whole(&messages);

    let mut end = end_of(stream, 1);
    end.finish = false;
    let ended = store_and_release(&pool, &tenant.account, "conv-1", holder, &tail, Some(&end));
    assert!(ended.await.is_err());
    assert_eq!(stored_messages(&pool, &tenant).await, json!([]));
    assert_eq!(
        conversation_holder(&pool, &tenant, "conv-1").await,
        Some(holder)
    );
    assert_eq!(
        turn_streams::state(&pool, stream)
            .await
            .unwrap()
            .chunk_count,
        1
    );
}
