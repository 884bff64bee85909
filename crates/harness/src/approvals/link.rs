//! An approval's one-time link: a random token in the URL; the server
//! keeps only its SHA-256, so the link works once and only for whoever
//! received it.

use std::fmt;

use rand::RngCore;
use sha2::{Digest, Sha256};
use url::Url;

/// Prefix of a link token.
const PREFIX: &str = "apl_";

/// A link token (its `Debug` never shows it).
#[derive(Clone, PartialEq, Eq)]
pub struct LinkToken(String);

impl LinkToken {
    /// A new token of 32 random bytes.
    pub fn mint() -> Self {
        let mut bytes = [0_u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        Self(format!("{PREFIX}{}", hex::encode(bytes)))
    }

    /// A presented token; `None` when it is not one in form.
    pub fn parse(presented: &str) -> Option<Self> {
        let hex = presented.strip_prefix(PREFIX)?;
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Self(presented.to_owned()))
    }

    /// What the server stores in place of the token.
    pub fn sha256(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }

    /// The link under `public_url` that decides with this token.
    pub fn url(&self, public_url: &Url) -> String {
        let base = public_url.as_str().trim_end_matches('/');
        format!("{base}/approval-links/{}", self.0)
    }
}

impl fmt::Debug for LinkToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LinkToken(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_parses_and_others_do_not() {
        let token = LinkToken::mint();
        assert_eq!(LinkToken::parse(&token.0), Some(token.clone()));
        assert_ne!(token, LinkToken::mint());
        for bad in ["", "apl_", "apl_zz", &token.0[..20], "xyz_0000"] {
            assert!(LinkToken::parse(bad).is_none(), "{bad}");
        }
        let url = Url::parse("https://tools.example.com/").unwrap();
        assert_eq!(
            token.url(&url),
            format!("https://tools.example.com/approval-links/{}", token.0)
        );
        assert!(!format!("{token:?}").contains(&token.0));
    }
}
