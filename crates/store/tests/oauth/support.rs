//! An account with a registered provider, and times Postgres keeps exactly.

use sqlx::PgPool;
use time::{Duration, OffsetDateTime};
use toolserver_domain::AccountId;
use toolserver_store::oauth_providers::{self, NewOAuthProvider};

/// The account `name`.
pub fn account(name: &str) -> AccountId {
    AccountId::parse(name).unwrap()
}

/// A confidential client at `name`, with no default scopes.
pub fn provider(name: &str) -> NewOAuthProvider<'_> {
    const SCOPES: &[String] = &[];
    NewOAuthProvider {
        name,
        authorization_url: "https://auth.example/authorize",
        token_url: "https://auth.example/token",
        client_id: "client-1",
        client_secret_sealed: Some(b"sealed-secret"),
        scopes: SCOPES,
        webhook: None,
    }
}

/// Registers `provider(name)` for `account`.
pub async fn register(pool: &PgPool, account: &AccountId, name: &str) {
    oauth_providers::put(pool, account, &provider(name))
        .await
        .unwrap();
}

/// Now plus `offset`, to the whole second (Postgres keeps microseconds).
pub fn at(offset: Duration) -> OffsetDateTime {
    (OffsetDateTime::now_utc() + offset)
        .replace_nanosecond(0)
        .unwrap()
}

/// `texts` as owned strings.
pub fn strings(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| (*t).to_owned()).collect()
}
