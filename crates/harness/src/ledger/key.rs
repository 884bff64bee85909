//! The idempotency key of a turn's call: derived from where the call sits
//! (account, turn, model pass, place in the pass), not from the model's
//! call id, which a provider may change when a pass is asked again; so
//! every retry and every restart of the same call carries the same key.

use sha2::{Digest, Sha256};
use toolserver_domain::AccountId;

/// The key of call `seq` of pass `step` of `turn` in `account`.
pub fn idempotency_key(account: &AccountId, turn: &str, step: i32, seq: i32) -> String {
    let mut hasher = Sha256::new();
    for part in [account.as_str(), turn] {
        hasher.update(part.len().to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.update(step.to_be_bytes());
    hasher.update(seq.to_be_bytes());
    let digest = hex::encode(hasher.finalize());
    format!("tck_{}", &digest[..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_follows_the_place_and_nothing_else() {
        let account = AccountId::parse("acct").unwrap();
        let key = idempotency_key(&account, "msg_1", 1, 0);
        assert_eq!(key, idempotency_key(&account, "msg_1", 1, 0));
        assert_eq!(key.len(), 36);
        assert_ne!(key, idempotency_key(&account, "msg_1", 1, 1));
        assert_ne!(key, idempotency_key(&account, "msg_1", 2, 0));
        assert_ne!(key, idempotency_key(&account, "msg_2", 1, 0));
        let other = AccountId::parse("acct2").unwrap();
        assert_ne!(key, idempotency_key(&other, "msg_1", 1, 0));
    }
}
