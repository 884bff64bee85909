//! Content-addressed storage of tool bundles. Bytes are stored under their
//! SHA-256, so the same bundle uploaded twice (by anyone) is stored once.
//! Both backends can mint a short-lived download URL that needs no bearer
//! token: S3 by presigning, the filesystem by an HMAC over hash and expiry
//! that this server checks when the URL is fetched.

mod cache;
mod error;
mod fs;
mod s3;
mod signing;

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use time::OffsetDateTime;
use toolserver_domain::Sha256Digest;
use url::Url;

pub use cache::{BundleCacheSettings, CachedBundleStore};
pub use error::BundleError;
pub use fs::FsBundleStore;
pub use s3::{S3BundleStore, S3Settings};
pub use signing::UrlSigner;

/// The result of storing a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredBundle {
    /// The content address.
    pub sha256: Sha256Digest,
    /// Size in bytes.
    pub size: u64,
    /// False when identical bytes were already stored.
    pub newly_stored: bool,
}

/// A download URL that stops working at `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedUrl {
    /// The URL to GET.
    pub url: Url,
    /// The moment the URL stops being accepted.
    pub expires_at: OffsetDateTime,
}

/// A place bundles are kept, addressed by their SHA-256.
#[async_trait]
pub trait BundleStore: Send + Sync + 'static {
    /// Stores `bytes` under their digest; storing bytes already present changes nothing.
    async fn put(&self, bytes: Bytes) -> Result<StoredBundle, BundleError>;

    /// Reads a bundle back, checking that its bytes still hash to `sha256`.
    async fn get(&self, sha256: &Sha256Digest) -> Result<Bytes, BundleError>;

    /// Whether a bundle is stored.
    async fn contains(&self, sha256: &Sha256Digest) -> Result<bool, BundleError>;

    /// A URL from which the bundle can be downloaded without other credentials until `ttl` passes.
    async fn signed_url(
        &self,
        sha256: &Sha256Digest,
        ttl: Duration,
    ) -> Result<SignedUrl, BundleError>;

    /// Checks a signature minted by this store for this server's own download
    /// route. Stores whose URLs point elsewhere (S3) answer `NotFound`.
    fn verify_download(
        &self,
        sha256: &Sha256Digest,
        expires: i64,
        signature: &str,
    ) -> Result<(), BundleError>;

    /// A short name of the backend, for logs and readiness output.
    fn backend(&self) -> &'static str;
}

/// Hashes `bytes`, refusing an empty bundle.
fn digest_of(bytes: &[u8]) -> Result<Sha256Digest, BundleError> {
    if bytes.is_empty() {
        return Err(BundleError::Empty);
    }
    Ok(Sha256Digest::of(bytes))
}

/// Fails with `Corrupt` unless `bytes` hash to `expected`.
fn verify_content(expected: &Sha256Digest, bytes: &[u8]) -> Result<(), BundleError> {
    let actual = Sha256Digest::of(bytes);
    if &actual == expected {
        Ok(())
    } else {
        Err(BundleError::Corrupt {
            expected: *expected,
            actual,
        })
    }
}

fn expiry_after(ttl: Duration) -> Result<OffsetDateTime, BundleError> {
    let ttl = time::Duration::try_from(ttl).map_err(|_| BundleError::InvalidTtl)?;
    OffsetDateTime::now_utc()
        .checked_add(ttl)
        .ok_or(BundleError::InvalidTtl)
}
