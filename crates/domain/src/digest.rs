//! SHA-256 digests that address bundles by content.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::ValidationError;

/// A SHA-256 digest; displayed and parsed as 64 lowercase hex characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Digest([u8; 32]);

impl Sha256Digest {
    /// Hashes `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// Parses 64 hex characters (either case).
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(raw, &mut out)
            .map_err(|_| ValidationError::new("sha256", "must be 64 hex characters"))?;
        Ok(Self(out))
    }

    /// The lowercase hex form.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The raw digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector_round_trips() {
        let d = Sha256Digest::of(b"abc");
        let hex = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(d.to_hex(), hex);
        assert_eq!(Sha256Digest::parse(hex).unwrap(), d);
        assert_eq!(Sha256Digest::parse(&hex.to_uppercase()).unwrap(), d);
    }

    #[test]
    fn rejects_wrong_length_and_non_hex() {
        assert!(Sha256Digest::parse("abc").is_err());
        assert!(Sha256Digest::parse(&"g".repeat(64)).is_err());
    }
}
