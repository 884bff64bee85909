//! Connections: a user's tokens stored after an authorization, read,
//! listed and deleted within their account; refreshed (a refresh that
//! gives no refresh token or no scopes keeps the old ones) one refresher
//! at a time; found by the refresh sweep when their expiry is near, and
//! not once their refresh failed for good; made active again by a new
//! authorization.

use std::time::Duration as StdDuration;

use sqlx::PgPool;
use time::Duration;
use toolserver_store::oauth_connections::{self, ConnectionRecord, Tokens};
use toolserver_store::StoreError;

use crate::support::{account, at, register, strings};

/// Stores `tokens` as `user`'s connection at `provider` of `acct_a`.
async fn upsert(
    pool: &PgPool,
    provider: &str,
    user: &str,
    tokens: &Tokens<'_>,
) -> ConnectionRecord {
    let mut tx = pool.begin().await.unwrap();
    let stored = oauth_connections::upsert(&mut tx, &account("acct_a"), provider, user, tokens)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    stored
}

fn key(account: &str, provider: &str, user: &str) -> (String, String, String) {
    (account.into(), provider.into(), user.into())
}

#[sqlx::test(migrations = "../../migrations")]
async fn tokens_are_stored_refreshed_swept_and_failed(pool: PgPool) {
    let a = account("acct_a");
    register(&pool, &a, "github").await;
    let scopes = strings(&["repo"]);
    let expires = at(Duration::hours(1));
    let stored = upsert(
        &pool,
        "github",
        "u1",
        &Tokens {
            access_sealed: b"access-1",
            refresh_sealed: Some(b"refresh-1"),
            expires_at: Some(expires),
            scopes: &scopes,
        },
    )
    .await;
    assert_eq!(stored.account_id, "acct_a");
    assert_eq!(
        (stored.provider.as_str(), stored.user_id.as_str()),
        ("github", "u1")
    );
    assert_eq!(stored.access_sealed, b"access-1");
    assert_eq!(stored.refresh_sealed.as_deref(), Some(&b"refresh-1"[..]));
    assert_eq!(stored.expires_at, Some(expires));
    assert_eq!(stored.scopes, scopes);
    assert_eq!(stored.status, "active");
    assert_eq!(
        (stored.last_error.clone(), stored.refreshed_at),
        (None, None)
    );
    assert_eq!(
        oauth_connections::get(&pool, &a, "github", "u1")
            .await
            .unwrap(),
        stored
    );

    // Due only when its expiry is near.
    let due = oauth_connections::due_for_refresh(&pool, 60.0, 10)
        .await
        .unwrap();
    assert!(due.is_empty(), "{due:?}");
    let due = oauth_connections::due_for_refresh(&pool, 7200.0, 10)
        .await
        .unwrap();
    assert_eq!(due, [key("acct_a", "github", "u1")]);

    // A refresh with no new refresh token and no scopes keeps the old ones.
    let soon = at(Duration::seconds(30));
    let mut tx = pool.begin().await.unwrap();
    let locked = oauth_connections::lock(&mut tx, &a, "github", "u1")
        .await
        .unwrap();
    assert_eq!(locked, stored);
    let refreshed = oauth_connections::record_refreshed(
        &mut tx,
        &a,
        "github",
        "u1",
        &Tokens {
            access_sealed: b"access-2",
            refresh_sealed: None,
            expires_at: Some(soon),
            scopes: &[],
        },
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(refreshed.access_sealed, b"access-2");
    assert_eq!(refreshed.refresh_sealed.as_deref(), Some(&b"refresh-1"[..]));
    assert_eq!(refreshed.expires_at, Some(soon));
    assert_eq!(refreshed.scopes, scopes);
    assert!(refreshed.refreshed_at.is_some());
    assert!(refreshed.updated_at > stored.updated_at);
    assert_eq!(refreshed.created_at, stored.created_at);
    assert_eq!(
        oauth_connections::get(&pool, &a, "github", "u1")
            .await
            .unwrap(),
        refreshed
    );
    let due = oauth_connections::due_for_refresh(&pool, 60.0, 10)
        .await
        .unwrap();
    assert_eq!(due, [key("acct_a", "github", "u1")]);

    // A refresh that gives both replaces both.
    let wider = strings(&["repo", "gist"]);
    let mut tx = pool.begin().await.unwrap();
    let replaced = oauth_connections::record_refreshed(
        &mut tx,
        &a,
        "github",
        "u1",
        &Tokens {
            access_sealed: b"access-3",
            refresh_sealed: Some(b"refresh-3"),
            expires_at: None,
            scopes: &wider,
        },
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(replaced.refresh_sealed.as_deref(), Some(&b"refresh-3"[..]));
    assert_eq!(
        (replaced.expires_at, replaced.scopes.clone()),
        (None, wider)
    );
    let due = oauth_connections::due_for_refresh(&pool, 1e9, 10)
        .await
        .unwrap();
    assert!(due.is_empty(), "no expiry is never due: {due:?}");

    // Failed for good: out of the sweep until authorized again.
    let mut tx = pool.begin().await.unwrap();
    oauth_connections::record_refreshed(
        &mut tx,
        &a,
        "github",
        "u1",
        &Tokens {
            access_sealed: b"access-4",
            refresh_sealed: None,
            expires_at: Some(soon),
            scopes: &[],
        },
    )
    .await
    .unwrap();
    oauth_connections::record_failed(&mut tx, &a, "github", "u1", "invalid_grant\0")
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let failed = oauth_connections::get(&pool, &a, "github", "u1")
        .await
        .unwrap();
    assert_eq!(failed.status, "failed");
    assert_eq!(failed.last_error.as_deref(), Some("invalid_grant\\u0000"));
    let due = oauth_connections::due_for_refresh(&pool, 60.0, 10)
        .await
        .unwrap();
    assert!(due.is_empty(), "{due:?}");

    // A new authorization replaces every token and makes it active again.
    let again = upsert(
        &pool,
        "github",
        "u1",
        &Tokens {
            access_sealed: b"access-5",
            refresh_sealed: None,
            expires_at: Some(soon),
            scopes: &[],
        },
    )
    .await;
    assert_eq!(again.status, "active");
    assert_eq!(again.last_error, None);
    assert_eq!(again.refresh_sealed, None);
    assert_eq!(again.refreshed_at, None);
    assert!(again.scopes.is_empty());
    assert_eq!(again.created_at, stored.created_at);
    let due = oauth_connections::due_for_refresh(&pool, 60.0, 10)
        .await
        .unwrap();
    assert!(
        due.is_empty(),
        "no refresh token, nothing to refresh: {due:?}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_sweep_takes_the_oldest_expiry_first_up_to_its_limit(pool: PgPool) {
    let a = account("acct_a");
    register(&pool, &a, "github").await;
    for (user, minutes) in [("late", 5), ("early", -5), ("middle", 1)] {
        upsert(
            &pool,
            "github",
            user,
            &Tokens {
                access_sealed: b"access",
                refresh_sealed: Some(b"refresh"),
                expires_at: Some(at(Duration::minutes(minutes))),
                scopes: &[],
            },
        )
        .await;
    }
    let due = oauth_connections::due_for_refresh(&pool, 600.0, 2)
        .await
        .unwrap();
    assert_eq!(
        due,
        [
            key("acct_a", "github", "early"),
            key("acct_a", "github", "middle")
        ]
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn one_refresh_at_a_time(pool: PgPool) {
    let a = account("acct_a");
    register(&pool, &a, "github").await;
    upsert(
        &pool,
        "github",
        "u1",
        &Tokens {
            access_sealed: b"access-1",
            refresh_sealed: Some(b"refresh-1"),
            expires_at: Some(at(Duration::minutes(1))),
            scopes: &[],
        },
    )
    .await;

    let mut first = pool.begin().await.unwrap();
    oauth_connections::lock(&mut first, &a, "github", "u1")
        .await
        .unwrap();
    let second = {
        let pool = pool.clone();
        let a = a.clone();
        tokio::spawn(async move {
            let mut tx = pool.begin().await.unwrap();
            let seen = oauth_connections::lock(&mut tx, &a, "github", "u1")
                .await
                .unwrap();
            tx.commit().await.unwrap();
            seen
        })
    };
    tokio::time::sleep(StdDuration::from_millis(300)).await;
    assert!(!second.is_finished(), "the second refresher waits");
    oauth_connections::record_refreshed(
        &mut first,
        &a,
        "github",
        "u1",
        &Tokens {
            access_sealed: b"access-2",
            refresh_sealed: None,
            expires_at: Some(at(Duration::hours(1))),
            scopes: &[],
        },
    )
    .await
    .unwrap();
    first.commit().await.unwrap();
    let seen = second.await.unwrap();
    assert_eq!(
        seen.access_sealed, b"access-2",
        "and reads the first's tokens"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn connections_are_listed_and_deleted_within_their_account(pool: PgPool) {
    let a = account("acct_a");
    let b = account("acct_b");
    register(&pool, &a, "github").await;
    register(&pool, &a, "atlassian").await;
    register(&pool, &b, "github").await;
    let tokens = Tokens {
        access_sealed: b"access",
        refresh_sealed: None,
        expires_at: None,
        scopes: &[],
    };
    for (provider, user) in [
        ("github", "u2"),
        ("github", "u1"),
        ("atlassian", "u1"),
        ("github", ""),
    ] {
        upsert(&pool, provider, user, &tokens).await;
    }

    let listed = |user: Option<&'static str>| {
        let pool = pool.clone();
        let a = a.clone();
        async move {
            oauth_connections::list(&pool, &a, user)
                .await
                .unwrap()
                .into_iter()
                .map(|c| (c.provider, c.user_id))
                .collect::<Vec<_>>()
        }
    };
    let pair = |p: &str, u: &str| (p.to_owned(), u.to_owned());
    assert_eq!(
        listed(None).await,
        [
            pair("atlassian", "u1"),
            pair("github", ""),
            pair("github", "u1"),
            pair("github", "u2")
        ]
    );
    assert_eq!(
        listed(Some("u1")).await,
        [pair("atlassian", "u1"), pair("github", "u1")]
    );
    assert_eq!(listed(Some("")).await, [pair("github", "")]);

    // Missing to another account.
    assert!(oauth_connections::list(&pool, &b, None)
        .await
        .unwrap()
        .is_empty());
    assert!(matches!(
        oauth_connections::get(&pool, &b, "github", "u1").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        oauth_connections::delete(&pool, &b, "github", "u1").await,
        Err(StoreError::NotFound)
    ));
    let mut tx = pool.begin().await.unwrap();
    assert!(matches!(
        oauth_connections::lock(&mut tx, &b, "github", "u1").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        oauth_connections::record_refreshed(&mut tx, &b, "github", "u1", &tokens).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        oauth_connections::record_failed(&mut tx, &b, "github", "u1", "no").await,
        Err(StoreError::NotFound)
    ));
    // Nor can B store tokens at a provider it has not registered.
    assert!(matches!(
        oauth_connections::upsert(&mut tx, &b, "atlassian", "u1", &tokens).await,
        Err(StoreError::NotFound)
    ));
    drop(tx);
    let kept = oauth_connections::get(&pool, &a, "github", "u1")
        .await
        .unwrap();
    assert_eq!(kept.status, "active", "A's connection is untouched");

    oauth_connections::delete(&pool, &a, "github", "u1")
        .await
        .unwrap();
    assert!(matches!(
        oauth_connections::get(&pool, &a, "github", "u1").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        oauth_connections::delete(&pool, &a, "github", "u1").await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(listed(None).await.len(), 3);
}
