//! Egress grants: what a runner outside this process (a Kubernetes pod) may
//! reach through a shared egress proxy, carried as a short-lived HS256 token
//! in the `Proxy-Authorization` of each `CONNECT`. The server mints one per
//! call ([`EgressKey::mint`]); the proxy trusts nothing else
//! ([`EgressKey::verify`]). A token speaks for one account's tool on one
//! runner, with the tool's allow list and the bundle URLs of that call, and
//! expires with the call.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use toolserver_domain::EgressAllowList;

/// The audience of egress tokens, so that no other token signed with the
/// same key passes as one.
const AUDIENCE: &str = "toolserver-egress";

/// Seconds of clock skew tolerated between the server and the proxy.
const LEEWAY_SECS: u64 = 5;

/// The shared secret of the server and its egress proxy.
#[derive(Clone)]
pub struct EgressKey {
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for EgressKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EgressKey(..)")
    }
}

/// What one token lets a runner reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressGrant {
    /// The runner the token was minted for (for logs).
    pub runner: String,
    /// The account whose code runs there.
    pub account: String,
    /// The tool it serves.
    pub tool: String,
    /// The tool's allow list; `None`: any public host.
    pub allow: Option<EgressAllowList>,
    /// URLs the runner may `GET` whatever their address (bundle links).
    pub admit: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Claims {
    aud: String,
    exp: u64,
    runner: String,
    account: String,
    tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allow: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    admit: Vec<String>,
}

impl EgressKey {
    /// Fewest bytes a key may have.
    pub const MIN_LEN: usize = 32;

    /// A key from the shared secret; refused when shorter than
    /// [`Self::MIN_LEN`] bytes.
    pub fn new(secret: &str) -> Result<Self, String> {
        if secret.len() < Self::MIN_LEN {
            return Err(format!(
                "the egress token key has {} bytes; it needs at least {}",
                secret.len(),
                Self::MIN_LEN
            ));
        }
        Ok(Self {
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            decoding: DecodingKey::from_secret(secret.as_bytes()),
        })
    }

    /// A token carrying `grant`, valid for `ttl`.
    pub fn mint(&self, grant: &EgressGrant, ttl: Duration) -> Result<String, String> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let claims = Claims {
            aud: AUDIENCE.to_owned(),
            exp: (now + ttl).as_secs(),
            runner: grant.runner.clone(),
            account: grant.account.clone(),
            tool: grant.tool.clone(),
            allow: grant.allow.as_ref().map(|allow| allow.patterns().to_vec()),
            admit: grant.admit.clone(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|err| format!("signing an egress token: {err}"))
    }

    /// The grant of `token` and how long it stays valid, or why it is not one.
    pub fn verify(&self, token: &str) -> Result<(EgressGrant, Duration), String> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "aud"]);
        validation.leeway = LEEWAY_SECS;
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation)
            .map_err(|err| format!("the egress token is not valid: {err}"))?
            .claims;
        let allow = claims
            .allow
            .map(|patterns| EgressAllowList::parse(&patterns))
            .transpose()
            .map_err(|err| format!("the egress token's allow list is not valid: {err}"))?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let left = Duration::from_secs(claims.exp + LEEWAY_SECS).saturating_sub(now);
        Ok((
            EgressGrant {
                runner: claims.runner,
                account: claims.account,
                tool: claims.tool,
                allow,
                admit: claims.admit,
            },
            left,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> EgressGrant {
        EgressGrant {
            runner: "tr-1".into(),
            account: "acme".into(),
            tool: "tool_1".into(),
            allow: Some(EgressAllowList::parse(&["api.example.com".into()]).unwrap()),
            admit: vec!["http://127.0.0.1:8080/bundles/x?sig=y".into()],
        }
    }

    #[test]
    fn a_minted_grant_verifies_back_with_its_lifetime() {
        let key = EgressKey::new(&"k".repeat(32)).unwrap();
        let token = key.mint(&grant(), Duration::from_secs(60)).unwrap();
        let (read, left) = key.verify(&token).unwrap();
        assert_eq!(read, grant());
        assert!(left > Duration::from_secs(50) && left <= Duration::from_secs(66));
    }

    #[test]
    fn another_key_an_expired_token_and_another_audience_are_refused() {
        let key = EgressKey::new(&"k".repeat(32)).unwrap();
        let other = EgressKey::new(&"o".repeat(32)).unwrap();
        let token = other.mint(&grant(), Duration::from_secs(60)).unwrap();
        assert!(key.verify(&token).unwrap_err().contains("not valid"));

        let expired = Claims {
            aud: AUDIENCE.into(),
            exp: 1,
            runner: "r".into(),
            account: "a".into(),
            tool: "t".into(),
            allow: None,
            admit: vec![],
        };
        let token =
            jsonwebtoken::encode(&Header::new(Algorithm::HS256), &expired, &key.encoding).unwrap();
        assert!(key.verify(&token).unwrap_err().contains("xpired"));

        let foreign = serde_json::json!({"aud": "toolserver", "exp": u64::MAX / 2, "sub": "acme"});
        let token =
            jsonwebtoken::encode(&Header::new(Algorithm::HS256), &foreign, &key.encoding).unwrap();
        assert!(key.verify(&token).is_err());
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(EgressKey::new("short").unwrap_err().contains("at least 32"));
    }
}
