//! Providers: registered, replaced (keeping when they were created),
//! listed by name, counted and deleted (with their connections and
//! authorizations); another account's provider of the same name is
//! another provider, missing to this one.

use sqlx::PgPool;
use time::Duration;
use toolserver_store::oauth_connections::{self, Tokens};
use toolserver_store::oauth_providers::{self, NewOAuthProvider};
use toolserver_store::StoreError;

use crate::support::{account, at, provider, register, strings};

#[sqlx::test(migrations = "../../migrations")]
async fn a_provider_is_registered_replaced_listed_and_deleted(pool: PgPool) {
    let a = account("acct_a");
    let (first, created) = oauth_providers::put(&pool, &a, &provider("github"))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(first.name, "github");
    assert_eq!(
        first.client_secret_sealed.as_deref(),
        Some(&b"sealed-secret"[..])
    );
    assert_eq!(first.created_at, first.updated_at);
    assert_eq!(
        oauth_providers::get(&pool, &a, "github").await.unwrap(),
        first
    );

    let scopes = strings(&["repo", "read:user"]);
    let public = NewOAuthProvider {
        client_id: "client-2",
        client_secret_sealed: None,
        scopes: &scopes,
        webhook: Some("https://hooks.example/oauth"),
        ..provider("github")
    };
    let (second, created) = oauth_providers::put(&pool, &a, &public).await.unwrap();
    assert!(!created, "the same name replaces");
    assert_eq!(second.client_id, "client-2");
    assert_eq!(second.client_secret_sealed, None);
    assert_eq!(second.scopes, scopes);
    assert_eq!(
        second.webhook.as_deref(),
        Some("https://hooks.example/oauth")
    );
    assert_eq!(second.created_at, first.created_at);
    assert!(second.updated_at > first.updated_at);
    assert_eq!(
        oauth_providers::get(&pool, &a, "github").await.unwrap(),
        second
    );

    register(&pool, &a, "atlassian").await;
    let names: Vec<String> = oauth_providers::list(&pool, &a)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["atlassian", "github"]);
    assert_eq!(oauth_providers::count(&pool, &a).await.unwrap(), 2);

    oauth_providers::delete(&pool, &a, "github").await.unwrap();
    assert!(matches!(
        oauth_providers::get(&pool, &a, "github").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        oauth_providers::delete(&pool, &a, "github").await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(oauth_providers::count(&pool, &a).await.unwrap(), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn another_accounts_provider_is_missing(pool: PgPool) {
    let a = account("acct_a");
    let b = account("acct_b");
    register(&pool, &a, "github").await;

    assert!(matches!(
        oauth_providers::get(&pool, &b, "github").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        oauth_providers::delete(&pool, &b, "github").await,
        Err(StoreError::NotFound)
    ));
    assert!(oauth_providers::list(&pool, &b).await.unwrap().is_empty());
    assert_eq!(oauth_providers::count(&pool, &b).await.unwrap(), 0);

    // B's provider of the same name is its own.
    let (_, created) = oauth_providers::put(&pool, &b, &provider("github"))
        .await
        .unwrap();
    assert!(created);
    oauth_providers::delete(&pool, &b, "github").await.unwrap();
    assert!(oauth_providers::get(&pool, &a, "github").await.is_ok());
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_name_out_of_form_is_refused(pool: PgPool) {
    let a = account("acct_a");
    let refused = oauth_providers::put(&pool, &a, &provider("no-dashes")).await;
    assert!(matches!(refused, Err(StoreError::Other(_))), "{refused:?}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn deleting_a_provider_deletes_its_connections(pool: PgPool) {
    let a = account("acct_a");
    register(&pool, &a, "github").await;
    let tokens = Tokens {
        access_sealed: b"access",
        refresh_sealed: None,
        expires_at: Some(at(Duration::hours(1))),
        scopes: &[],
    };
    let mut conn = pool.acquire().await.unwrap();
    oauth_connections::upsert(&mut conn, &a, "github", "u1", &tokens)
        .await
        .unwrap();
    drop(conn);

    oauth_providers::delete(&pool, &a, "github").await.unwrap();
    assert!(matches!(
        oauth_connections::get(&pool, &a, "github", "u1").await,
        Err(StoreError::NotFound)
    ));
}
