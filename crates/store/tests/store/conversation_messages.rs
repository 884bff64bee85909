//! A conversation's messages as rows: a write sends only its tail, a take
//! reads them only when the caller's head is stale, and a conversation
//! stored whole before rows existed is read as it was and moved by its next
//! write.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_store::conversation_messages::MessageTail;
use toolserver_store::conversations::{self, Begun, Known, KnownWrite, LeaseTerms};
use toolserver_store::turn_end;
use uuid::Uuid;

use crate::support::{live_process, tenant, Tenant};

fn message(id: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": id}]})
}

fn tail(from: usize, messages: &[Value]) -> MessageTail {
    MessageTail {
        from,
        total: from + messages.len(),
        messages: messages.iter().map(Value::to_string).collect(),
    }
}

async fn take(pool: &PgPool, tenant: &Tenant, known: Option<i64>) -> (Uuid, Begun) {
    take_writing(pool, tenant, known, None).await
}

async fn take_writing(
    pool: &PgPool,
    tenant: &Tenant,
    head: Option<i64>,
    write: Option<KnownWrite<'_>>,
) -> (Uuid, Begun) {
    let holder = Uuid::now_v7();
    let terms = LeaseTerms {
        holder,
        process: live_process(pool).await,
        lease: Duration::from_secs(60),
    };
    let begun = conversations::begin_turn(
        &mut pool.acquire().await.unwrap(),
        &tenant.account,
        &tenant.conversation,
        tenant.agent,
        terms,
        Known { head, write },
    )
    .await
    .unwrap();
    (holder, begun)
}

async fn rows(pool: &PgPool, tenant: &Tenant) -> Vec<(i32, Value)> {
    sqlx::query_as(
        "SELECT seq, message FROM conversation_messages \
         WHERE account_id = $1 AND conversation_id = $2 ORDER BY seq",
    )
    .bind(tenant.account.as_str())
    .bind(&tenant.conversation)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = "../../migrations")]
async fn writes_send_their_tail_and_the_head_names_what_is_stored(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let (holder, begun) = take(&pool, &tenant, None).await;
    let Begun::Held {
        head,
        messages,
        moved,
        ..
    } = begun
    else {
        panic!("{begun:?}");
    };
    assert_eq!((messages, moved), (Some(vec![]), true));

    let first = conversations::save(
        &pool,
        &tenant.account,
        &tenant.conversation,
        holder,
        &tail(0, &[message("a"), message("b")]),
    )
    .await
    .unwrap();
    assert_ne!(first, head, "a write draws a new head");
    let ended = turn_end::store_and_release(
        &mut pool.acquire().await.unwrap(),
        &tenant.account,
        &tenant.conversation,
        holder,
        &tail(1, &[message("B"), message("c")]),
        None,
    )
    .await
    .unwrap();
    let last = ended.stored.unwrap();
    assert_ne!(last, first);
    let stored: Vec<Value> = rows(&pool, &tenant)
        .await
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(stored, [message("a"), message("B"), message("c")]);

    // A taker that knows the head reads nothing; one that does not reads all.
    let (holder, begun) = take(&pool, &tenant, Some(last)).await;
    assert!(
        matches!(&begun, Begun::Held { head, messages: None, .. } if *head == last),
        "{begun:?}"
    );
    conversations::end_turn(&pool, &tenant.account, &tenant.conversation, holder)
        .await
        .unwrap();
    let (holder, begun) = take(&pool, &tenant, Some(last - 1)).await;
    assert!(
        matches!(&begun, Begun::Held { messages: Some(read), .. } if *read == stored),
        "{begun:?}"
    );

    // A shorter conversation loses the rows past its end.
    turn_end::store_and_release(
        &mut pool.acquire().await.unwrap(),
        &tenant.account,
        &tenant.conversation,
        holder,
        &tail(1, &[]),
        None,
    )
    .await
    .unwrap();
    assert_eq!(rows(&pool, &tenant).await, [(0, message("a"))]);
    let record = conversations::get(&pool, &tenant.account, &tenant.conversation)
        .await
        .unwrap();
    assert_eq!(record.messages, [message("a")]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_conversation_stored_whole_is_read_as_it_was_and_moved_by_its_next_write(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let (holder, _) = take(&pool, &tenant, None).await;
    turn_end::store_and_release(
        &mut pool.acquire().await.unwrap(),
        &tenant.account,
        &tenant.conversation,
        holder,
        &tail(0, &[message("rows")]),
        None,
    )
    .await
    .unwrap();
    let legacy = json!([message("old-1"), message("old-2")]);
    sqlx::query(
        "WITH gone AS (DELETE FROM conversation_messages \
                       WHERE account_id = $1 AND conversation_id = $2) \
         UPDATE conversations SET messages = $3::json, message_count = NULL, head = 0 \
         WHERE account_id = $1 AND id = $2",
    )
    .bind(tenant.account.as_str())
    .bind(&tenant.conversation)
    .bind(legacy.to_string())
    .execute(&pool)
    .await
    .unwrap();
    let record = conversations::get(&pool, &tenant.account, &tenant.conversation)
        .await
        .unwrap();
    assert_eq!(Value::Array(record.messages), legacy);

    let (holder, begun) = take(&pool, &tenant, None).await;
    assert!(
        matches!(&begun, Begun::Held { moved: false, messages: Some(read), .. } if Value::Array(read.clone()) == legacy),
        "{begun:?}"
    );
    // Only a whole write may move it.
    let partial = conversations::save(
        &pool,
        &tenant.account,
        &tenant.conversation,
        holder,
        &tail(2, &[message("new")]),
    )
    .await;
    assert!(partial.is_err(), "{partial:?}");
    let whole = [message("old-1"), message("old-2"), message("new")];
    conversations::save(
        &pool,
        &tenant.account,
        &tenant.conversation,
        holder,
        &MessageTail::whole(&whole),
    )
    .await
    .unwrap();
    let stored: Vec<Value> = rows(&pool, &tenant)
        .await
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(stored, whole);
    let (count, left): (Option<i32>, Value) = sqlx::query_as(
        "SELECT message_count, messages FROM conversations WHERE account_id = $1 AND id = $2",
    )
    .bind(tenant.account.as_str())
    .bind(&tenant.conversation)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((count, left), (Some(3), json!([])));
}

#[sqlx::test(migrations = "../../migrations")]
async fn rows_go_with_their_conversation_and_stay_within_their_account(pool: PgPool) {
    let a = tenant(&pool, "acct-a").await;
    let b = tenant(&pool, "acct-b").await;
    for tenant in [&a, &b] {
        let (holder, _) = take(&pool, tenant, None).await;
        turn_end::store_and_release(
            &mut pool.acquire().await.unwrap(),
            &tenant.account,
            &tenant.conversation,
            holder,
            &tail(0, &[message(tenant.account.as_str())]),
            None,
        )
        .await
        .unwrap();
    }
    assert_eq!(rows(&pool, &a).await, [(0, message("acct-a"))]);
    sqlx::query("DELETE FROM conversations WHERE account_id = $1")
        .bind(a.account.as_str())
        .execute(&pool)
        .await
        .unwrap();
    assert!(rows(&pool, &a).await.is_empty());
    assert_eq!(rows(&pool, &b).await, [(0, message("acct-b"))]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn idle_conversations_stored_whole_are_moved_in_batches(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    for id in ["c1", "c2", "c3"] {
        sqlx::query(
            "INSERT INTO conversations (account_id, id, agent_id, messages, message_count, head) \
             VALUES ($1, $2, $3, $4::json, NULL, 0)",
        )
        .bind(tenant.account.as_str())
        .bind(id)
        .bind(tenant.agent.as_uuid())
        .bind(json!([message(id), message("second")]).to_string())
        .execute(&pool)
        .await
        .unwrap();
    }
    assert_eq!(conversations::move_unmoved(&pool, 2).await.unwrap(), 2);
    assert_eq!(conversations::move_unmoved(&pool, 2).await.unwrap(), 1);
    assert_eq!(conversations::move_unmoved(&pool, 2).await.unwrap(), 0);
    for id in ["c1", "c2", "c3"] {
        let record = conversations::get(&pool, &tenant.account, id)
            .await
            .unwrap();
        assert_eq!(record.messages, [message(id), message("second")]);
    }
    let (unmoved,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM conversations WHERE message_count IS NULL OR messages::text <> '[]'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(unmoved, 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_take_stores_its_write_only_while_what_it_knows_is_stored(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let first = tail(0, &[message("a")]);
    let write = KnownWrite {
        head: -7,
        tail: &first,
    };
    let (holder, begun) = take_writing(&pool, &tenant, None, Some(write)).await;
    assert!(
        matches!(
            &begun,
            Begun::Held {
                head: -7,
                wrote: true,
                messages: None,
                ..
            }
        ),
        "a new conversation takes the write: {begun:?}"
    );
    conversations::end_turn(&pool, &tenant.account, &tenant.conversation, holder)
        .await
        .unwrap();

    let second = tail(1, &[message("b")]);
    let write = KnownWrite {
        head: -8,
        tail: &second,
    };
    let (holder, begun) = take_writing(&pool, &tenant, Some(-7), Some(write)).await;
    assert!(
        matches!(
            &begun,
            Begun::Held {
                head: -8,
                wrote: true,
                ..
            }
        ),
        "{begun:?}"
    );
    conversations::end_turn(&pool, &tenant.account, &tenant.conversation, holder)
        .await
        .unwrap();
    let stored: Vec<Value> = rows(&pool, &tenant)
        .await
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(stored, [message("a"), message("b")]);

    // Prepared against a stale head (or as if new): taken, not written, and
    // the stored messages read instead.
    for known in [Some(-7), None] {
        let stale = tail(known.map_or(0, |_| 1), &[message("x")]);
        let write = KnownWrite {
            head: -9,
            tail: &stale,
        };
        let (holder, begun) = take_writing(&pool, &tenant, known, Some(write)).await;
        assert!(
            matches!(&begun, Begun::Held { head: -8, wrote: false, messages: Some(read), .. } if *read == stored),
            "{begun:?}"
        );
        conversations::end_turn(&pool, &tenant.account, &tenant.conversation, holder)
            .await
            .unwrap();
    }
    let after: Vec<Value> = rows(&pool, &tenant)
        .await
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(after, stored);
}
