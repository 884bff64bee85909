//! Channel events: recorded once by their platform id, claimed by one
//! starter at a time (a lapsed claim is taken up again), started once (a
//! second start of the same event is refused inside the turn's own
//! transaction, which then leaves nothing behind), and given up with the
//! channel told, once. A conversation's channel answers are posted in the
//! order they were recorded.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_store::async_turns::{self, NewTurn};
use toolserver_store::channel_events::{self, NewChannelEvent};
use toolserver_store::webhook_deliveries::{self, NewDelivery};
use toolserver_store::StoreError;
use uuid::Uuid;

use crate::support::{exec, lease, live_process, tenant, terms, Tenant};

const CLAIM: Duration = Duration::from_secs(60);

async fn record(pool: &PgPool, tenant: &Tenant, key: &str) -> Option<Uuid> {
    let (message, reply_to) = (json!({"id": "m", "role": "user"}), json!({"chat_id": 1}));
    let event = NewChannelEvent {
        id: Uuid::now_v7(),
        account: &tenant.account,
        agent: tenant.agent,
        channel: "support",
        event_key: key,
        conversation_id: "conv-ch",
        message: &message,
        reply_to: &reply_to,
    };
    channel_events::record(pool, &event, CLAIM)
        .await
        .unwrap()
        .map(|recorded| recorded.id)
}

/// The events a starter may claim now, claimed.
async fn claimable(pool: &PgPool) -> Vec<channel_events::ChannelEvent> {
    channel_events::claim_unstarted(pool, 10, CLAIM)
        .await
        .unwrap()
}

/// A channel answer saying `text`.
fn channel_post(text: &str) -> NewDelivery {
    NewDelivery {
        id: Uuid::now_v7(),
        kind: "channel",
        url: "channel:x".into(),
        body: json!({"text": text}),
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_event_is_recorded_claimed_and_started_once(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let id = record(&pool, &a, "Ev1").await.expect("a new event");
    assert_eq!(record(&pool, &a, "Ev1").await, None, "a platform's retry");

    // The recorder's claim holds; once it lapses, one claimant takes it.
    assert!(claimable(&pool).await.is_empty());
    exec(
        &pool,
        "UPDATE channel_events SET claimed_until = now() - interval '1 second' WHERE id = $1",
        id,
    )
    .await;
    let claimed = claimable(&pool).await;
    assert_eq!((claimed.len(), claimed[0].attempts), (1, 2));
    assert!(claimable(&pool).await.is_empty());

    // Started by a turn; a second start of it is refused and leaves no turn.
    let process = live_process(&pool).await;
    let start = |holder| NewTurn {
        agent: a.agent,
        conversation_id: "conv-ch",
        lease_holder: holder,
        reply_subject: None,
        channel_event: Some(id),
        end_user: None,
        claim: terms(process),
    };
    let holder = lease(&pool, &a, "conv-ch", process).await;
    let (turn, _) = async_turns::create(&pool, &a.account, start(holder))
        .await
        .unwrap();
    assert_eq!(
        channel_events::get(&pool, id).await.unwrap().turn_id,
        Some(turn)
    );
    assert_eq!(
        async_turns::channel_event(&pool, turn).await.unwrap(),
        Some(id)
    );
    exec(
        &pool,
        "UPDATE conversations SET active_turn = NULL WHERE id = $1",
        "conv-ch",
    )
    .await;
    let again = lease(&pool, &a, "conv-ch", process).await;
    assert!(matches!(
        async_turns::create(&pool, &a.account, start(again)).await,
        Err(StoreError::Conflict { .. })
    ));
    let turns: i64 = sqlx::query_scalar("SELECT count(*) FROM async_turns")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(turns, 1);
    exec(
        &pool,
        "UPDATE channel_events SET claimed_until = NULL WHERE id = $1",
        id,
    )
    .await;
    assert!(
        claimable(&pool).await.is_empty(),
        "a started event is not claimed"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_postponed_event_waits_and_a_given_up_one_tells_its_channel_once(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let id = record(&pool, &a, "Ev1").await.unwrap();
    channel_events::postpone(&pool, id, Duration::from_secs(3600), "busy")
        .await
        .unwrap();
    assert!(claimable(&pool).await.is_empty());
    exec(
        &pool,
        "UPDATE channel_events SET next_attempt_at = now() WHERE id = $1",
        id,
    )
    .await;
    let event = claimable(&pool).await.remove(0);
    channel_events::give_up(
        &pool,
        &event,
        "the agent was deleted",
        Some(&channel_post("first")),
    )
    .await
    .unwrap();
    channel_events::give_up(&pool, &event, "again", Some(&channel_post("second")))
        .await
        .unwrap();
    let notices: Vec<(String,)> = sqlx::query_as("SELECT body->>'text' FROM webhook_deliveries")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(notices, [("first".to_owned(),)]);
    exec(
        &pool,
        "UPDATE channel_events SET claimed_until = NULL WHERE id = $1",
        id,
    )
    .await;
    assert!(claimable(&pool).await.is_empty());
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_conversations_answers_are_posted_in_order(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let (first, second, elsewhere) = (
        channel_post("first"),
        channel_post("second"),
        channel_post("elsewhere"),
    );
    let mut conn = pool.acquire().await.unwrap();
    for (conversation, delivery) in [
        ("conv-1", &first),
        ("conv-1", &second),
        ("conv-2", &elsewhere),
    ] {
        webhook_deliveries::insert(&mut conn, &a.account, conversation, delivery)
            .await
            .unwrap();
    }
    let ids = |due: Vec<webhook_deliveries::DueDelivery>| {
        let mut ids: Vec<Uuid> = due.into_iter().map(|d| d.id).collect();
        ids.sort();
        ids
    };
    let due = webhook_deliveries::claim_due(&pool, 10, CLAIM)
        .await
        .unwrap();
    assert_eq!(
        ids(due),
        [first.id, elsewhere.id],
        "the second waits for the first"
    );
    webhook_deliveries::attempt_failed(&pool, first.id, "refused", Some(Duration::ZERO))
        .await
        .unwrap();
    let due = webhook_deliveries::claim_due(&pool, 10, CLAIM)
        .await
        .unwrap();
    assert_eq!(
        ids(due),
        [first.id],
        "still waiting while the first is retried"
    );
    webhook_deliveries::delivered(&pool, first.id)
        .await
        .unwrap();
    let due = webhook_deliveries::claim_due(&pool, 10, CLAIM)
        .await
        .unwrap();
    assert_eq!(ids(due), [second.id]);
}
