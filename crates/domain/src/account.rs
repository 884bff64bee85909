//! Account (tenant) identifiers, taken from a verified token claim.

use std::fmt;

use crate::ValidationError;

/// The longest account id accepted from a token claim.
pub const MAX_ACCOUNT_ID_LEN: usize = 128;

/// A tenant identifier. Every stored resource belongs to exactly one account.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccountId(String);

impl AccountId {
    /// Parses an account id: 1 to 128 characters of letters, digits and `_ - . : @`.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        let ok_len = !raw.is_empty() && raw.len() <= MAX_ACCOUNT_ID_LEN;
        let ok_chars = raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '@'));
        if ok_len && ok_chars {
            Ok(Self(raw.to_owned()))
        } else {
            Err(ValidationError::new(
                "account",
                format!(
                    "account id must be 1-{MAX_ACCOUNT_ID_LEN} characters of letters, digits and _ - . : @"
                ),
            ))
        }
    }

    /// The id as stored and compared.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_typical_ids() {
        for ok in ["acct_1", "user@example.com", "org:team-a.b"] {
            assert_eq!(AccountId::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn rejects_empty_long_and_odd_characters() {
        let long = "a".repeat(MAX_ACCOUNT_ID_LEN + 1);
        for bad in ["", long.as_str(), "a b", "a/b", "é"] {
            assert!(AccountId::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
