//! Verification keys fetched from a JWKS URL, cached by `kid`. An unknown
//! `kid` triggers one refetch, at most once per `min_refresh` interval, so a
//! flood of tokens with made-up key ids cannot turn into a flood of fetches.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio::sync::Mutex;
use url::Url;

/// A cache of the keys published at one JWKS URL.
pub struct JwksKeys {
    url: Url,
    client: reqwest::Client,
    min_refresh: Duration,
    state: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    keys: HashMap<String, Arc<DecodingKey>>,
    fetched_at: Option<Instant>,
}

impl JwksKeys {
    /// A cache for `url` that refetches at most once per `min_refresh`.
    pub fn new(url: Url, client: reqwest::Client, min_refresh: Duration) -> Self {
        Self {
            url,
            client,
            min_refresh,
            state: Mutex::new(Cache::default()),
        }
    }

    /// The key for `kid` usable with `alg`, refetching the set once if it is unknown.
    pub async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Option<Arc<DecodingKey>> {
        let kid = kid?;
        let mut cache = self.state.lock().await;
        if let Some(key) = cache.keys.get(kid) {
            return Some(key.clone());
        }
        let stale = cache
            .fetched_at
            .is_none_or(|at| at.elapsed() >= self.min_refresh);
        if stale {
            cache.fetched_at = Some(Instant::now());
            match self.fetch(alg).await {
                Ok(keys) => cache.keys = keys,
                Err(err) => tracing::warn!(jwks.url = %self.url, error = %err, "JWKS fetch failed"),
            }
        }
        cache.keys.get(kid).cloned()
    }

    async fn fetch(&self, alg: Algorithm) -> Result<HashMap<String, Arc<DecodingKey>>, String> {
        let set: JwkSet = self
            .client
            .get(self.url.clone())
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let (Some(kid), Ok(key)) = (jwk.common.key_id.clone(), DecodingKey::from_jwk(jwk))
            else {
                continue;
            };
            let declared = jwk
                .common
                .key_algorithm
                .and_then(|a| a.to_string().parse::<Algorithm>().ok());
            if declared.is_none_or(|declared| declared == alg) {
                keys.insert(kid, Arc::new(key));
            }
        }
        Ok(keys)
    }
}
