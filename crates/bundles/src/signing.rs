//! HMAC-signed, expiring download URLs for bundles served by this server.
//!
//! A URL is `{base}/bundles/{sha256}?expires={unix seconds}&signature={hex}`,
//! where the signature is HMAC-SHA256 over `"{sha256}:{expires}"`. The check
//! compares MACs in constant time and refuses an expired URL even when the
//! signature is good.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use time::OffsetDateTime;
use toolserver_domain::Sha256Digest;
use url::Url;

use crate::{BundleError, SignedUrl};

type HmacSha256 = Hmac<Sha256>;

/// Mints and checks signed bundle download URLs.
#[derive(Clone)]
pub struct UrlSigner {
    key: Vec<u8>,
    base: Url,
}

impl std::fmt::Debug for UrlSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlSigner")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

impl UrlSigner {
    /// A signer whose URLs start at `base` (the server's public URL), keyed by `key`.
    /// `None` when `base` cannot have a path (such as `mailto:`).
    pub fn new(key: impl Into<Vec<u8>>, base: Url) -> Option<Self> {
        if base.cannot_be_a_base() {
            return None;
        }
        Some(Self {
            key: key.into(),
            base,
        })
    }

    fn mac(&self, sha256: &Sha256Digest, expires: i64) -> HmacSha256 {
        // HMAC takes keys of any length, so this cannot fail.
        let mut mac = HmacSha256::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        mac.update(format!("{sha256}:{expires}").as_bytes());
        mac
    }

    /// A URL for `sha256` valid until `expires_at`.
    pub fn sign(&self, sha256: &Sha256Digest, expires_at: OffsetDateTime) -> SignedUrl {
        let expires = expires_at.unix_timestamp();
        let signature = hex::encode(self.mac(sha256, expires).finalize().into_bytes());
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments
                .pop_if_empty()
                .push("bundles")
                .push(&sha256.to_hex());
        }
        url.query_pairs_mut()
            .append_pair("expires", &expires.to_string())
            .append_pair("signature", &signature);
        SignedUrl {
            url,
            expires_at: OffsetDateTime::from_unix_timestamp(expires).unwrap_or(expires_at),
        }
    }

    /// Accepts a signature made by [`UrlSigner::sign`] that has not expired at `now`.
    pub fn verify(
        &self,
        sha256: &Sha256Digest,
        expires: i64,
        signature: &str,
        now: OffsetDateTime,
    ) -> Result<(), BundleError> {
        let given = hex::decode(signature).map_err(|_| BundleError::BadSignature)?;
        self.mac(sha256, expires)
            .verify_slice(&given)
            .map_err(|_| BundleError::BadSignature)?;
        if now.unix_timestamp() >= expires {
            return Err(BundleError::Expired);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> UrlSigner {
        UrlSigner::new(
            b"k".to_vec(),
            Url::parse("http://127.0.0.1:9/base/").unwrap(),
        )
        .unwrap()
    }

    fn parts(url: &Url) -> (i64, String) {
        let q: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
        (q["expires"].parse().unwrap(), q["signature"].clone())
    }

    #[test]
    fn signed_url_verifies_until_expiry() {
        let sha = Sha256Digest::of(b"bundle");
        let now = OffsetDateTime::now_utc();
        let signed = signer().sign(&sha, now + time::Duration::seconds(60));
        assert_eq!(signed.url.path(), format!("/base/bundles/{sha}"));
        let (expires, sig) = parts(&signed.url);
        assert!(signer().verify(&sha, expires, &sig, now).is_ok());
        let later = now + time::Duration::seconds(61);
        assert!(matches!(
            signer().verify(&sha, expires, &sig, later),
            Err(BundleError::Expired)
        ));
    }

    #[test]
    fn tampering_is_refused() {
        let sha = Sha256Digest::of(b"bundle");
        let now = OffsetDateTime::now_utc();
        let (expires, sig) = parts(&signer().sign(&sha, now + time::Duration::seconds(60)).url);
        let other = Sha256Digest::of(b"other");
        let bad = |r: Result<(), BundleError>| matches!(r, Err(BundleError::BadSignature));
        assert!(bad(signer().verify(&other, expires, &sig, now)));
        assert!(bad(signer().verify(&sha, expires + 3600, &sig, now)));
        assert!(bad(signer().verify(&sha, expires, "zz", now)));
        let foreign = UrlSigner::new(b"other-key".to_vec(), signer().base).unwrap();
        assert!(bad(foreign.verify(&sha, expires, &sig, now)));
    }
}
