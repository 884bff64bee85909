//! Errors of the bundle store.

use toolserver_domain::Sha256Digest;

/// What went wrong storing or reading a bundle.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// An empty bundle was offered.
    #[error("bundle is empty")]
    Empty,
    /// No bundle is stored under this digest (or a download signature is not valid here).
    #[error("bundle not found")]
    NotFound,
    /// A signed download URL was used after it expired.
    #[error("download link expired")]
    Expired,
    /// A signed download URL's signature does not match.
    #[error("download signature is invalid")]
    BadSignature,
    /// A signed URL was asked for with a lifetime that cannot be represented.
    #[error("signed URL lifetime is out of range")]
    InvalidTtl,
    /// Stored bytes no longer hash to their address.
    #[error("stored bundle {expected} is corrupt (hashes to {actual})")]
    Corrupt {
        /// The address the bytes were stored under.
        expected: Sha256Digest,
        /// What they hash to now.
        actual: Sha256Digest,
    },
    /// The filesystem failed.
    #[error("bundle filesystem error: {0}")]
    Io(#[from] std::io::Error),
    /// The S3 service failed or could not be reached.
    #[error("S3 error: {0}")]
    S3(String),
}
