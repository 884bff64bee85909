//! The HMAC-SHA256 signatures channels use, checked in constant time, and
//! the freshness of a signed timestamp.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// `message` signed with `secret`, in lowercase hex.
pub fn hmac_hex(secret: &str, message: &[u8]) -> String {
    // HMAC takes a key of any length, so this never fails.
    let Ok(mut mac) = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(message);
    hex::encode(mac.finalize().into_bytes())
}

/// Whether `signature` (hex) is `message` signed with `secret`.
pub fn verify_hex(secret: &str, message: &[u8], signature: &str) -> bool {
    let expected = hmac_hex(secret, message);
    let given = signature.trim().to_ascii_lowercase();
    expected.as_bytes().ct_eq(given.as_bytes()).into()
}

/// Whether two secrets are equal, compared in constant time.
pub fn same_secret(expected: &str, given: &str) -> bool {
    expected.as_bytes().ct_eq(given.as_bytes()).into()
}

/// Whether the Unix time `stamp` (seconds, as sent) is within `window` of
/// `now`.
pub fn fresh(stamp: &str, now: i64, window: Duration) -> bool {
    let Ok(stamp) = stamp.trim().parse::<i64>() else {
        return false;
    };
    let window = i64::try_from(window.as_secs()).unwrap_or(i64::MAX);
    now.abs_diff(stamp) <= window.unsigned_abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_slacks_documented_example() {
        let secret = "8f742231b10e8888abcd99yyyzzz85a5";
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let message = format!("v0:1531420618:{body}");
        assert!(verify_hex(
            secret,
            message.as_bytes(),
            "a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
        ));
        assert!(!verify_hex(secret, message.as_bytes(), "a2114d57"));
    }

    #[test]
    fn a_stamp_is_fresh_within_the_window_either_way() {
        let window = Duration::from_secs(300);
        assert!(fresh("1000", 1300, window));
        assert!(fresh("1300", 1000, window));
        assert!(!fresh("1000", 1301, window));
        assert!(!fresh("soon", 1000, window));
    }
}
