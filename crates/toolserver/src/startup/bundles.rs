//! The bundle store: a directory with signed download links, or an S3
//! bucket.

use std::sync::Arc;

use anyhow::Context;
use toolserver_bundles::{
    BundleCacheSettings, BundleStore, CachedBundleStore, FsBundleStore, S3BundleStore, S3Settings,
    UrlSigner,
};
use url::Url;

use crate::config::{BundleBackend, BundleConfig, DatabaseConfig, ServeConfig};
use crate::keys;

/// The configured store; an S3 bucket is checked to be reachable.
pub(super) async fn store(
    config: &BundleConfig,
    db: &DatabaseConfig,
    public_url: &Url,
) -> anyhow::Result<Arc<dyn BundleStore>> {
    match config.bundle_store {
        BundleBackend::Fs => {
            let key = match &config.bundle_url_secret {
                Some(secret) => secret.expose().to_owned(),
                None => keys::load_or_create_secret(&db.data_dir.join("bundle-url.key"))?,
            };
            let signer = UrlSigner::new(key.into_bytes(), public_url.clone())
                .context("TOOLSERVER_PUBLIC_URL cannot be a base URL")?;
            let dir = config
                .bundle_dir
                .clone()
                .unwrap_or_else(|| db.data_dir.join("bundles"));
            Ok(Arc::new(FsBundleStore::open(dir, signer).await?))
        }
        BundleBackend::S3 => {
            let bucket = config
                .s3_bucket
                .clone()
                .context("TOOLSERVER_S3_BUCKET is required with TOOLSERVER_BUNDLE_STORE=s3")?;
            let credentials = match (&config.s3_access_key_id, &config.s3_secret_access_key) {
                (Some(key), Some(secret)) => Some((key.clone(), secret.clone())),
                (None, None) => None,
                _ => anyhow::bail!("set both TOOLSERVER_S3_ACCESS_KEY_ID and TOOLSERVER_S3_SECRET_ACCESS_KEY, or neither"),
            };
            let store = S3BundleStore::connect(S3Settings {
                bucket,
                prefix: config.s3_prefix.clone(),
                region: config.s3_region.clone(),
                endpoint: config.s3_endpoint.clone(),
                force_path_style: config.s3_force_path_style,
                credentials,
            })
            .await;
            store
                .check_bucket()
                .await
                .context("the S3 bucket is not reachable")?;
            Ok(Arc::new(store))
        }
    }
}

/// `store` with the bundles runners get inline kept in memory, up to
/// `TOOLSERVER_BUNDLE_CACHE_BYTES`.
pub(super) fn cached(store: Arc<dyn BundleStore>, config: &ServeConfig) -> Arc<dyn BundleStore> {
    let settings = BundleCacheSettings {
        budget_bytes: config.bundles.bundle_cache_bytes,
        max_entry_bytes: config.runners.inline_bundle_max_bytes,
    };
    Arc::new(CachedBundleStore::new(store, settings))
}
