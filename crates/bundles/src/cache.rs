//! Small bundles kept in memory in front of any store: a call sends its
//! tool's bundle to the runner inline, and reading it from disk or S3 (and
//! hashing it again) on every call costs more than the call itself. Bundles
//! are addressed by their content, so a kept one is never stale; the least
//! recently read go first when the byte budget is full.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use lru::LruCache;
use toolserver_domain::Sha256Digest;

use crate::{BundleError, BundleStore, SignedUrl, StoredBundle};

/// How much a [`CachedBundleStore`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BundleCacheSettings {
    /// Most bytes kept in all (0: nothing is kept).
    pub budget_bytes: u64,
    /// Largest bundle kept; larger ones are read from the store each time.
    pub max_entry_bytes: u64,
}

/// A store whose small bundles are read once, then served from memory.
pub struct CachedBundleStore {
    inner: Arc<dyn BundleStore>,
    settings: BundleCacheSettings,
    kept: Mutex<Kept>,
}

/// The bundles in memory and their total size.
struct Kept {
    bundles: LruCache<Sha256Digest, Bytes>,
    bytes: u64,
}

impl CachedBundleStore {
    /// `inner` with its bundles of up to `settings.max_entry_bytes` kept in
    /// memory, `settings.budget_bytes` in all.
    pub fn new(inner: Arc<dyn BundleStore>, settings: BundleCacheSettings) -> Self {
        Self {
            inner,
            settings,
            kept: Mutex::new(Kept {
                bundles: LruCache::unbounded(),
                bytes: 0,
            }),
        }
    }

    /// Bytes kept in memory now.
    pub fn kept_bytes(&self) -> u64 {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `bytes` if they fit, making room by dropping the least
    /// recently read.
    fn keep(&self, sha256: Sha256Digest, bytes: &Bytes) {
        let size = bytes.len() as u64;
        let BundleCacheSettings {
            budget_bytes,
            max_entry_bytes,
        } = self.settings;
        if size > max_entry_bytes || size > budget_bytes {
            return;
        }
        let mut kept = self.lock();
        if let Some(replaced) = kept.bundles.put(sha256, bytes.clone()) {
            kept.bytes -= replaced.len() as u64;
        }
        kept.bytes += size;
        while kept.bytes > budget_bytes {
            match kept.bundles.pop_lru() {
                Some((_, dropped)) => kept.bytes -= dropped.len() as u64,
                None => break,
            }
        }
    }
}

#[async_trait]
impl BundleStore for CachedBundleStore {
    async fn put(&self, bytes: Bytes) -> Result<StoredBundle, BundleError> {
        self.inner.put(bytes).await
    }

    async fn get(&self, sha256: &Sha256Digest) -> Result<Bytes, BundleError> {
        if let Some(bytes) = self.lock().bundles.get(sha256) {
            return Ok(bytes.clone());
        }
        let bytes = self.inner.get(sha256).await?;
        self.keep(*sha256, &bytes);
        Ok(bytes)
    }

    async fn contains(&self, sha256: &Sha256Digest) -> Result<bool, BundleError> {
        self.inner.contains(sha256).await
    }

    async fn signed_url(
        &self,
        sha256: &Sha256Digest,
        ttl: Duration,
    ) -> Result<SignedUrl, BundleError> {
        self.inner.signed_url(sha256, ttl).await
    }

    fn verify_download(
        &self,
        sha256: &Sha256Digest,
        expires: i64,
        signature: &str,
    ) -> Result<(), BundleError> {
        self.inner.verify_download(sha256, expires, signature)
    }

    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::{FsBundleStore, UrlSigner};

    /// A filesystem store that counts its reads.
    struct Counting {
        store: FsBundleStore,
        reads: AtomicUsize,
    }

    #[async_trait]
    impl BundleStore for Counting {
        async fn put(&self, bytes: Bytes) -> Result<StoredBundle, BundleError> {
            self.store.put(bytes).await
        }
        async fn get(&self, sha256: &Sha256Digest) -> Result<Bytes, BundleError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.store.get(sha256).await
        }
        async fn contains(&self, sha256: &Sha256Digest) -> Result<bool, BundleError> {
            self.store.contains(sha256).await
        }
        async fn signed_url(
            &self,
            sha256: &Sha256Digest,
            ttl: Duration,
        ) -> Result<SignedUrl, BundleError> {
            self.store.signed_url(sha256, ttl).await
        }
        fn verify_download(
            &self,
            sha256: &Sha256Digest,
            expires: i64,
            signature: &str,
        ) -> Result<(), BundleError> {
            self.store.verify_download(sha256, expires, signature)
        }
        fn backend(&self) -> &'static str {
            "counting"
        }
    }

    async fn cached(
        dir: &std::path::Path,
        budget_bytes: u64,
        max_entry_bytes: u64,
    ) -> (CachedBundleStore, Arc<Counting>) {
        let signer =
            UrlSigner::new(b"k".to_vec(), url::Url::parse("http://127.0.0.1/").unwrap()).unwrap();
        let counting = Arc::new(Counting {
            store: FsBundleStore::open(dir.to_path_buf(), signer)
                .await
                .unwrap(),
            reads: AtomicUsize::new(0),
        });
        let settings = BundleCacheSettings {
            budget_bytes,
            max_entry_bytes,
        };
        (CachedBundleStore::new(counting.clone(), settings), counting)
    }

    #[tokio::test]
    async fn a_small_bundle_is_read_from_the_store_once() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, counting) = cached(dir.path(), 1024, 1024).await;
        let stored = cache.put(Bytes::from_static(b"small")).await.unwrap();
        for _ in 0..3 {
            assert_eq!(cache.get(&stored.sha256).await.unwrap(), "small");
        }
        assert_eq!(counting.reads.load(Ordering::SeqCst), 1);
        assert_eq!(cache.kept_bytes(), 5);
    }

    #[tokio::test]
    async fn a_bundle_over_the_entry_limit_is_read_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, counting) = cached(dir.path(), 1024, 4).await;
        let stored = cache.put(Bytes::from_static(b"large")).await.unwrap();
        cache.get(&stored.sha256).await.unwrap();
        cache.get(&stored.sha256).await.unwrap();
        assert_eq!(counting.reads.load(Ordering::SeqCst), 2);
        assert_eq!(cache.kept_bytes(), 0);
    }

    #[tokio::test]
    async fn the_least_recently_read_goes_when_the_budget_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, counting) = cached(dir.path(), 10, 10).await;
        let first = cache.put(Bytes::from_static(b"aaaa")).await.unwrap();
        let second = cache.put(Bytes::from_static(b"bbbb")).await.unwrap();
        let third = cache.put(Bytes::from_static(b"cccc")).await.unwrap();
        cache.get(&first.sha256).await.unwrap();
        cache.get(&second.sha256).await.unwrap();
        cache.get(&first.sha256).await.unwrap();
        cache.get(&third.sha256).await.unwrap();
        assert_eq!(cache.kept_bytes(), 8, "the second made room for the third");
        assert_eq!(counting.reads.load(Ordering::SeqCst), 3);
        cache.get(&first.sha256).await.unwrap();
        assert_eq!(counting.reads.load(Ordering::SeqCst), 3, "the first stayed");
        cache.get(&second.sha256).await.unwrap();
        assert_eq!(counting.reads.load(Ordering::SeqCst), 4, "the second went");
    }

    #[tokio::test]
    async fn a_missing_bundle_is_not_found_and_nothing_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, _) = cached(dir.path(), 1024, 1024).await;
        let absent = Sha256Digest::of(b"never stored");
        assert!(matches!(
            cache.get(&absent).await,
            Err(BundleError::NotFound)
        ));
        assert_eq!(cache.kept_bytes(), 0);
    }
}
