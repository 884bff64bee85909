//! A conversation's subject: `<prefix>.<account>.<conversation>`, each id
//! as one token of unpadded URL-safe base64 of its UTF-8 bytes. Account and
//! conversation ids may hold `.` (and a conversation id `*`, `>` or
//! whitespace), none of which a subject token may; the encoding maps every
//! id to a token of letters, digits, `-` and `_`, and back.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use toolserver_domain::AccountId;

/// The subject of `account`'s conversation `conversation_id` under `prefix`.
pub(crate) fn conversation_subject(
    prefix: &str,
    account: &AccountId,
    conversation_id: &str,
) -> String {
    format!(
        "{prefix}.{}.{}",
        token(account.as_str()),
        token(conversation_id)
    )
}

fn token(id: &str) -> String {
    URL_SAFE_NO_PAD.encode(id.as_bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn any_conversation_id_is_one_safe_token_that_maps_back() {
        let account = AccountId::parse("acct.one@example:1").unwrap();
        for id in ["plain", "a.b", "a*b", "x > y", "tab\there", "ünï.côdé", "."] {
            let subject = conversation_subject("toolserver.turns", &account, id);
            let tokens: Vec<&str> = subject.split('.').collect();
            assert_eq!(tokens.len(), 4, "{subject}");
            for token in &tokens[2..] {
                assert!(
                    token
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                    "{token}"
                );
            }
            let decoded = URL_SAFE_NO_PAD.decode(tokens[3]).unwrap();
            assert_eq!(String::from_utf8(decoded).unwrap(), id);
            let account_back = URL_SAFE_NO_PAD.decode(tokens[2]).unwrap();
            assert_eq!(account_back, account.as_str().as_bytes());
        }
    }

    #[test]
    fn different_conversations_get_different_subjects() {
        let account = AccountId::parse("acct").unwrap();
        let a = conversation_subject("p", &account, "a.b");
        let b = conversation_subject("p", &account, "a_b");
        let c = conversation_subject("p", &AccountId::parse("acct2").unwrap(), "a.b");
        assert_ne!(a, b);
        assert_ne!(a, c);
    }
}
