//! The token a detached call's runner presents to complete it or to ping:
//! random, minted per launch, told only to that runner; the server keeps
//! only its SHA-256.

use std::fmt;

use sha2::{Digest, Sha256};

/// A job token, made only by minting ([`JobToken::from_random`]) or by
/// reading a presented header ([`JobToken::parse`]). Its `Debug` never
/// shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct JobToken(String);

impl JobToken {
    /// A token made of 32 random bytes (drawn by the caller), in hex.
    pub fn from_random(secret: [u8; 32]) -> Self {
        Self(hex::encode(secret))
    }

    /// A presented token; `None` when it is empty.
    pub fn parse(presented: &str) -> Option<Self> {
        (!presented.is_empty()).then(|| Self(presented.to_owned()))
    }

    /// The SHA-256 the server stores in place of the token.
    pub fn sha256(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }

    /// The token as the runner sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for JobToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobToken([redacted])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_hashes_like_the_same_token_presented() {
        let minted = JobToken::from_random([7; 32]);
        let presented = JobToken::parse(minted.expose()).unwrap();
        assert_eq!(minted.sha256(), presented.sha256());
        assert_eq!(minted.expose().len(), 64);
    }

    #[test]
    fn an_empty_token_is_none_and_debug_hides_the_token() {
        assert!(JobToken::parse("").is_none());
        let token = JobToken::from_random([1; 32]);
        assert!(!format!("{token:?}").contains(token.expose()));
    }
}
