//! Filesystem bundle store: `{root}/{first two hex}/{sha256}`, written via a
//! temporary file and an atomic rename so a reader never sees half a bundle.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use time::OffsetDateTime;
use tokio::io::AsyncWriteExt;
use toolserver_domain::Sha256Digest;

use crate::{
    digest_of, expiry_after, verify_content, BundleError, BundleStore, SignedUrl, StoredBundle,
    UrlSigner,
};

/// Bundles kept in a local directory; download URLs are signed by this server.
#[derive(Debug)]
pub struct FsBundleStore {
    root: PathBuf,
    signer: UrlSigner,
}

impl FsBundleStore {
    /// Opens (creating if needed) a store rooted at `root`.
    pub async fn open(root: impl Into<PathBuf>, signer: UrlSigner) -> Result<Self, BundleError> {
        let root = root.into();
        tokio::fs::create_dir_all(root.join("tmp")).await?;
        Ok(Self { root, signer })
    }

    fn path_of(&self, sha256: &Sha256Digest) -> PathBuf {
        let hex = sha256.to_hex();
        self.root.join(&hex[..2]).join(hex)
    }

    async fn write_atomically(&self, dest: &Path, bytes: &[u8]) -> Result<(), BundleError> {
        if let Some(dir) = dest.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        let tmp = self
            .root
            .join("tmp")
            .join(format!("{}.partial", uuid::Uuid::new_v4().simple()));
        let result = async {
            let mut file = tokio::fs::File::create(&tmp).await?;
            file.write_all(bytes).await?;
            file.sync_all().await?;
            tokio::fs::rename(&tmp, dest).await
        }
        .await;
        if result.is_err() {
            // Best effort: the partial file is garbage either way.
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        Ok(result?)
    }
}

#[async_trait]
impl BundleStore for FsBundleStore {
    async fn put(&self, bytes: Bytes) -> Result<StoredBundle, BundleError> {
        let sha256 = digest_of(&bytes)?;
        let dest = self.path_of(&sha256);
        let newly_stored = !tokio::fs::try_exists(&dest).await?;
        if newly_stored {
            self.write_atomically(&dest, &bytes).await?;
        }
        Ok(StoredBundle {
            sha256,
            size: bytes.len() as u64,
            newly_stored,
        })
    }

    async fn get(&self, sha256: &Sha256Digest) -> Result<Bytes, BundleError> {
        let bytes = match tokio::fs::read(self.path_of(sha256)).await {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == ErrorKind::NotFound => return Err(BundleError::NotFound),
            Err(err) => return Err(err.into()),
        };
        verify_content(sha256, &bytes)?;
        Ok(bytes.into())
    }

    async fn contains(&self, sha256: &Sha256Digest) -> Result<bool, BundleError> {
        Ok(tokio::fs::try_exists(self.path_of(sha256)).await?)
    }

    async fn signed_url(
        &self,
        sha256: &Sha256Digest,
        ttl: Duration,
    ) -> Result<SignedUrl, BundleError> {
        Ok(self.signer.sign(sha256, expiry_after(ttl)?))
    }

    fn verify_download(
        &self,
        sha256: &Sha256Digest,
        expires: i64,
        signature: &str,
    ) -> Result<(), BundleError> {
        self.signer
            .verify(sha256, expires, signature, OffsetDateTime::now_utc())
    }

    fn backend(&self) -> &'static str {
        "fs"
    }
}
