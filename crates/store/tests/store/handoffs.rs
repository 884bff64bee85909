//! Handoffs and their webhook deliveries: a handoff and its announcement are
//! stored together, seen by the next lease, and released once; a delivery is
//! claimed by one attempt at a time, retried after its wait, given up after
//! its last attempt, and taken up again when the claim of a process that
//! died lapses. Another account sees none of it.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_store::conversation_messages::MessageTail;
use toolserver_store::conversations::{self, Begun, Known, LeaseTerms};
use toolserver_store::handoffs::{self, ANNOUNCEMENT};
use toolserver_store::webhook_deliveries::{self, NewDelivery};
use toolserver_store::StoreError;
use uuid::Uuid;

use crate::support::{exec, lease, live_process, tenant};

fn announcement(url: &str) -> NewDelivery {
    NewDelivery {
        id: Uuid::now_v7(),
        kind: ANNOUNCEMENT,
        url: url.into(),
        body: json!({"type": "conversation.handoff"}),
    }
}

const CLAIM: Duration = Duration::from_secs(60);

#[sqlx::test(migrations = "../../migrations")]
async fn a_handoff_is_stored_with_its_announcement_and_released_once(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let b = tenant(&pool, "acct_b").await;
    let process = live_process(&pool).await;
    let holder = lease(&pool, &a, "conv-1", process).await;
    let handoff = json!({"reason": "refund", "toolCallId": "call_1"});
    let posted = announcement("https://hooks.example/h");
    handoffs::hand_off(&pool, &a.account, "conv-1", &handoff, Some(&posted))
        .await
        .unwrap();
    assert!(matches!(
        handoffs::hand_off(&pool, &a.account, "nowhere", &handoff, Some(&posted)).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        conversations::get(&pool, &b.account, "conv-1").await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        conversations::get(&pool, &a.account, "conv-1")
            .await
            .unwrap()
            .handoff,
        Some(handoff.clone())
    );
    let state = webhook_deliveries::latest(&pool, &a.account, "conv-1", ANNOUNCEMENT)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((state.id, state.attempts), (posted.id, 0));
    assert!(
        webhook_deliveries::latest(&pool, &b.account, "conv-1", ANNOUNCEMENT)
            .await
            .unwrap()
            .is_none()
    );

    // The next turn's lease sees the handoff.
    let said = [json!({"id": "m1", "role": "user", "parts": []})];
    conversations::save(
        &pool,
        &a.account,
        "conv-1",
        holder,
        &MessageTail::whole(&said),
    )
    .await
    .unwrap();
    conversations::end_turn(&pool, &a.account, "conv-1", holder)
        .await
        .unwrap();
    let terms = LeaseTerms {
        holder: Uuid::now_v7(),
        process,
        lease: Duration::from_secs(60),
    };
    let begun = conversations::begin_turn(
        &mut pool.acquire().await.unwrap(),
        &a.account,
        "conv-1",
        a.agent,
        terms,
        Known::default(),
    )
    .await
    .unwrap();
    assert!(
        matches!(&begun, Begun::Held { handoff: Some(seen), .. } if *seen == handoff),
        "{begun:?}"
    );

    assert!(matches!(
        handoffs::release(&pool, &b.account, "conv-1").await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        handoffs::release(&pool, &a.account, "conv-1")
            .await
            .unwrap(),
        Some(handoff)
    );
    assert_eq!(
        handoffs::release(&pool, &a.account, "conv-1")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        conversations::get(&pool, &a.account, "conv-1")
            .await
            .unwrap()
            .handoff,
        None
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_delivery_is_claimed_once_retried_then_delivered_or_given_up(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let process = live_process(&pool).await;
    lease(&pool, &a, "conv-1", process).await;
    lease(&pool, &a, "conv-2", process).await;
    let first = announcement("https://hooks.example/1");
    let second = announcement("https://hooks.example/2");
    for (conversation, delivery) in [("conv-1", &first), ("conv-2", &second)] {
        handoffs::hand_off(&pool, &a.account, conversation, &json!({}), Some(delivery))
            .await
            .unwrap();
    }

    let claimed = webhook_deliveries::claim_due(&pool, 10, CLAIM)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert!(claimed.iter().all(|due| due.attempts == 1));
    assert!(
        webhook_deliveries::claim_due(&pool, 10, CLAIM)
            .await
            .unwrap()
            .is_empty(),
        "a claimed post is not claimed again while its claim lasts"
    );

    webhook_deliveries::attempt_failed(&pool, first.id, "answered 500", Some(CLAIM))
        .await
        .unwrap();
    webhook_deliveries::attempt_failed(&pool, second.id, "answered 500", None)
        .await
        .unwrap();
    assert!(webhook_deliveries::claim_due(&pool, 10, CLAIM)
        .await
        .unwrap()
        .is_empty());
    let given_up = webhook_deliveries::latest(&pool, &a.account, "conv-2", ANNOUNCEMENT)
        .await
        .unwrap()
        .unwrap();
    assert!(given_up.failed_at.is_some() && given_up.delivered_at.is_none());
    assert_eq!(given_up.last_error.as_deref(), Some("answered 500"));

    // Its wait over, the first is tried again, and taken.
    exec(
        &pool,
        "UPDATE webhook_deliveries SET next_attempt_at = now() WHERE id = $1",
        first.id,
    )
    .await;
    let again = webhook_deliveries::claim_due(&pool, 10, CLAIM)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].id, again[0].attempts), (first.id, 2));
    webhook_deliveries::delivered(&pool, first.id)
        .await
        .unwrap();
    let taken = webhook_deliveries::latest(&pool, &a.account, "conv-1", ANNOUNCEMENT)
        .await
        .unwrap()
        .unwrap();
    assert!(taken.delivered_at.is_some() && taken.failed_at.is_none());
    assert_eq!((taken.attempts, taken.last_error), (2, None));
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_post_of_a_process_that_died_is_taken_up_when_its_claim_lapses(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let process = live_process(&pool).await;
    lease(&pool, &a, "conv-1", process).await;
    let posted = announcement("https://hooks.example/h");
    handoffs::hand_off(&pool, &a.account, "conv-1", &json!({}), Some(&posted))
        .await
        .unwrap();
    assert_eq!(
        webhook_deliveries::claim_due(&pool, 10, CLAIM)
            .await
            .unwrap()
            .len(),
        1
    );
    exec(
        &pool,
        "UPDATE webhook_deliveries SET claimed_until = now() - interval '1 second' WHERE id = $1",
        posted.id,
    )
    .await;
    let taken_up = webhook_deliveries::claim_due(&pool, 10, CLAIM)
        .await
        .unwrap();
    assert_eq!(taken_up.len(), 1);
    assert_eq!((taken_up[0].id, taken_up[0].attempts), (posted.id, 2));
}
