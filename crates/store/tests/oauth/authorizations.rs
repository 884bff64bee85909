//! Authorizations: found by the hash of their state whatever the account,
//! by id only within it; completed once (a second completion learns it
//! lost); the message whose calls waited on them resumed once none is
//! pending, and found by the sweep when its resumption was lost; those
//! left pending past their expiry found by the expiry sweep.

use sqlx::PgPool;
use time::Duration;
use toolserver_domain::AccountId;
use toolserver_store::oauth_authorizations::{self, NewAuthorization, WaitingCall};
use toolserver_store::StoreError;
use uuid::Uuid;

use crate::support::{account, at, register};

/// An authorization `id` of `user` at `github`, its state hashing to
/// `[state; 32]`, for the call `call` of message `m1` (none when `None`),
/// lapsing an hour from now.
fn new(id: &str, state: u8, call: Option<&str>) -> NewAuthorization {
    NewAuthorization {
        id: id.into(),
        provider: "github".into(),
        user_id: "u1".into(),
        state_sha256: vec![state; 32],
        verifier_sealed: format!("verifier-{id}").into_bytes(),
        waiting: call.map(|call| WaitingCall {
            agent_id: Uuid::from_u128(7),
            conversation_id: "conv-1".into(),
            message_id: "m1".into(),
            tool_call_id: call.into(),
            tool: "list_repos".into(),
        }),
        expires_at: at(Duration::hours(1)),
    }
}

async fn insert(pool: &PgPool, account: &AccountId, rows: &[NewAuthorization]) {
    let mut tx = pool.begin().await.unwrap();
    oauth_authorizations::insert(&mut tx, account, rows)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

async fn complete(
    pool: &PgPool,
    account: &AccountId,
    id: &str,
    status: &str,
    error: Option<&str>,
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await.unwrap();
    let done = oauth_authorizations::complete(&mut tx, account, id, status, error).await;
    tx.commit().await.unwrap();
    done
}

/// Moves every completion back an hour, past any grace.
async fn age_completions(pool: &PgPool) {
    sqlx::query("UPDATE oauth_authorizations SET completed_at = completed_at - interval '1 hour'")
        .execute(pool)
        .await
        .unwrap();
}

fn message(account: &str) -> (String, String, String) {
    (account.into(), "conv-1".into(), "m1".into())
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_authorization_is_found_by_its_state_and_completed_once(pool: PgPool) {
    let a = account("acct_a");
    let b = account("acct_b");
    register(&pool, &a, "github").await;
    let started = new("auth_1", 1, Some("call-1"));
    insert(&pool, &a, std::slice::from_ref(&started)).await;

    let found = oauth_authorizations::by_state(&pool, &[1; 32])
        .await
        .unwrap();
    assert_eq!(found.id, "auth_1");
    assert_eq!(found.account_id, "acct_a");
    assert_eq!(
        (found.provider.as_str(), found.user_id.as_str()),
        ("github", "u1")
    );
    assert_eq!(found.verifier_sealed, b"verifier-auth_1");
    assert_eq!(found.waiting, started.waiting);
    assert_eq!(found.status, "pending");
    assert_eq!(found.expires_at, started.expires_at);
    assert_eq!(
        (found.error.clone(), found.completed_at, found.resumed_at),
        (None, None, None)
    );
    assert_eq!(
        oauth_authorizations::get(&pool, &a, "auth_1")
            .await
            .unwrap(),
        found
    );
    assert!(matches!(
        oauth_authorizations::by_state(&pool, &[2; 32]).await,
        Err(StoreError::NotFound)
    ));

    // Inserting it again leaves it as it is.
    insert(&pool, &a, &[new("auth_1", 1, None)]).await;
    assert_eq!(
        oauth_authorizations::get(&pool, &a, "auth_1")
            .await
            .unwrap(),
        found
    );

    // Missing to another account.
    assert!(matches!(
        oauth_authorizations::get(&pool, &b, "auth_1").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        complete(&pool, &b, "auth_1", "failed", None).await,
        Err(StoreError::NotFound)
    ));

    assert!(complete(&pool, &a, "auth_1", "authorized", None)
        .await
        .unwrap());
    assert!(
        !complete(&pool, &a, "auth_1", "failed", Some("too late"))
            .await
            .unwrap(),
        "a second completion loses"
    );
    let completed = oauth_authorizations::get(&pool, &a, "auth_1")
        .await
        .unwrap();
    assert_eq!(completed.status, "authorized");
    assert_eq!(completed.error, None);
    assert!(completed.completed_at.is_some());
    assert!(matches!(
        complete(&pool, &a, "auth_missing", "failed", None).await,
        Err(StoreError::NotFound)
    ));
}

#[sqlx::test(migrations = "../../migrations")]
async fn no_completion_back_to_pending_nor_to_an_unknown_status(pool: PgPool) {
    let a = account("acct_a");
    register(&pool, &a, "github").await;
    insert(&pool, &a, &[new("auth_1", 1, None)]).await;
    for status in ["pending", "granted"] {
        let refused = complete(&pool, &a, "auth_1", status, None).await;
        assert!(
            matches!(refused, Err(StoreError::Other(_))),
            "{status}: {refused:?}"
        );
    }
    let failed = complete(&pool, &a, "auth_1", "failed", Some("access_denied\0")).await;
    assert!(failed.unwrap());
    let stored = oauth_authorizations::get(&pool, &a, "auth_1")
        .await
        .unwrap();
    assert_eq!(stored.error.as_deref(), Some("access_denied\\u0000"));
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_authorization_needs_a_registered_provider(pool: PgPool) {
    let a = account("acct_a");
    let mut tx = pool.begin().await.unwrap();
    let refused = oauth_authorizations::insert(&mut tx, &a, &[new("auth_1", 1, None)]).await;
    assert!(matches!(refused, Err(StoreError::NotFound)), "{refused:?}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_message_resumes_once_none_of_its_authorizations_is_pending(pool: PgPool) {
    let a = account("acct_a");
    register(&pool, &a, "github").await;
    insert(
        &pool,
        &a,
        &[
            new("auth_1", 1, Some("call-1")),
            new("auth_2", 2, Some("call-2")),
            new("auth_3", 3, None),
        ],
    )
    .await;

    let waited: Vec<String> = oauth_authorizations::of_message(&pool, &a, "conv-1", "m1")
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(waited, ["auth_1", "auth_2"]);

    assert!(complete(&pool, &a, "auth_1", "authorized", None)
        .await
        .unwrap());
    assert!(complete(&pool, &a, "auth_3", "authorized", None)
        .await
        .unwrap());
    age_completions(&pool).await;
    let lost = oauth_authorizations::unresumed(&pool, 0.0, 10)
        .await
        .unwrap();
    assert!(lost.is_empty(), "auth_2 is still pending: {lost:?}");

    assert!(
        complete(&pool, &a, "auth_2", "failed", Some("access_denied"))
            .await
            .unwrap()
    );
    let lost = oauth_authorizations::unresumed(&pool, 60.0, 10)
        .await
        .unwrap();
    assert!(
        lost.is_empty(),
        "auth_2 completed within the grace: {lost:?}"
    );
    age_completions(&pool).await;
    let lost = oauth_authorizations::unresumed(&pool, 60.0, 10)
        .await
        .unwrap();
    assert_eq!(lost, [message("acct_a")], "one row per message");

    let message_of = oauth_authorizations::of_message(&pool, &a, "conv-1", "m1")
        .await
        .unwrap();
    let statuses: Vec<&str> = message_of.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, ["authorized", "failed"]);

    // Another account's message of the same ids is another message.
    let b = account("acct_b");
    oauth_authorizations::mark_resumed(&pool, &b, "conv-1", "m1")
        .await
        .unwrap();
    assert!(oauth_authorizations::of_message(&pool, &b, "conv-1", "m1")
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        oauth_authorizations::unresumed(&pool, 60.0, 10)
            .await
            .unwrap(),
        [message("acct_a")]
    );

    oauth_authorizations::mark_resumed(&pool, &a, "conv-1", "m1")
        .await
        .unwrap();
    let resumed = oauth_authorizations::of_message(&pool, &a, "conv-1", "m1")
        .await
        .unwrap();
    assert!(
        resumed.iter().all(|r| r.resumed_at.is_some()),
        "{resumed:?}"
    );
    let unwaited = oauth_authorizations::get(&pool, &a, "auth_3")
        .await
        .unwrap();
    assert_eq!(unwaited.resumed_at, None, "no call waited on auth_3");
    let lost = oauth_authorizations::unresumed(&pool, 0.0, 10)
        .await
        .unwrap();
    assert!(lost.is_empty(), "{lost:?}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn pending_authorizations_past_their_expiry_are_swept(pool: PgPool) {
    let a = account("acct_a");
    let b = account("acct_b");
    register(&pool, &a, "github").await;
    register(&pool, &b, "github").await;
    let lapsed = |id: &str, state: u8, minutes: i64| NewAuthorization {
        expires_at: at(Duration::minutes(-minutes)),
        ..new(id, state, Some("call-1"))
    };
    insert(&pool, &a, &[lapsed("auth_1", 1, 1), new("auth_2", 2, None)]).await;
    insert(&pool, &b, &[lapsed("auth_3", 3, 5), lapsed("auth_4", 4, 3)]).await;
    // A completed one is no longer pending.
    assert!(complete(&pool, &b, "auth_4", "authorized", None)
        .await
        .unwrap());

    let expired: Vec<(String, String)> = oauth_authorizations::expired(&pool, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.account_id, r.id))
        .collect();
    let pair = |a: &str, i: &str| (a.to_owned(), i.to_owned());
    assert_eq!(
        expired,
        [pair("acct_b", "auth_3"), pair("acct_a", "auth_1")]
    );
    let first = oauth_authorizations::expired(&pool, 1).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].id, "auth_3");

    assert!(complete(&pool, &b, "auth_3", "expired", None)
        .await
        .unwrap());
    let left: Vec<String> = oauth_authorizations::expired(&pool, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(left, ["auth_1"]);
}
