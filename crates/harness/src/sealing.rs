//! Credentials at rest: agent secrets and account secrets are sealed with
//! XChaCha20-Poly1305 under the server's secrets key, bound to their row
//! (account and agent, or account and secret name, as the associated
//! data), so a sealed blob moved to another row does not open.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};
use toolserver_domain::{AccountId, AgentId, Secrets};

const NONCE_LEN: usize = 24;

/// A sealed blob could not be opened (wrong key, wrong row, or damaged).
#[derive(Debug, thiserror::Error)]
#[error("stored credentials could not be opened with the server's secrets key")]
pub struct SealError;

/// Seals and opens agent credentials and account secrets, and signs what
/// the server hands out to be presented back (fetch grants).
#[derive(Clone)]
pub struct SecretBox {
    cipher: XChaCha20Poly1305,
    mac: Hmac<Sha256>,
}

impl SecretBox {
    /// A box using a 32-byte key.
    pub fn new(key: &[u8; 32]) -> Self {
        let half = |label: &[u8]| -> [u8; 32] {
            let mut derivation = Sha256::new();
            derivation.update(label);
            derivation.update(key);
            derivation.finalize().into()
        };
        let mut mac_key = [0u8; 64];
        mac_key[..32].copy_from_slice(&half(b"toolserver/mac-key/v1/a"));
        mac_key[32..].copy_from_slice(&half(b"toolserver/mac-key/v1/b"));
        Self {
            cipher: XChaCha20Poly1305::new(key.into()),
            mac: <Hmac<Sha256> as KeyInit>::new(&mac_key.into()),
        }
    }

    /// HMAC-SHA256 of `data` under a key derived from the secrets key, so
    /// every server sharing that key checks what any of them signed.
    pub fn mac(&self, data: &[u8]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    /// Seals `secrets` for one agent; `None` when there are none.
    pub fn seal(&self, secrets: &Secrets, account: &AccountId, agent: AgentId) -> Option<Vec<u8>> {
        if secrets.is_empty() {
            return None;
        }
        let plaintext = serde_json::to_vec(secrets).ok()?;
        self.seal_bytes(&plaintext, &associated_data(account, agent))
    }

    /// Opens what [`seal`](Self::seal) made for the same account and agent.
    pub fn open(
        &self,
        sealed: Option<&[u8]>,
        account: &AccountId,
        agent: AgentId,
    ) -> Result<Secrets, SealError> {
        let Some(sealed) = sealed else {
            return Ok(Secrets::default());
        };
        let plaintext = self.open_bytes(sealed, &associated_data(account, agent))?;
        serde_json::from_slice(&plaintext).map_err(|_| SealError)
    }

    /// Seals the value of `account`'s secret `name`.
    pub fn seal_account_secret(
        &self,
        value: &str,
        account: &AccountId,
        name: &str,
    ) -> Option<Vec<u8>> {
        self.seal_bytes(value.as_bytes(), &secret_data(account, name))
    }

    /// Opens what [`seal_account_secret`](Self::seal_account_secret) made
    /// for the same account and name.
    pub fn open_account_secret(
        &self,
        sealed: &[u8],
        account: &AccountId,
        name: &str,
    ) -> Result<String, SealError> {
        let plaintext = self.open_bytes(sealed, &secret_data(account, name))?;
        String::from_utf8(plaintext).map_err(|_| SealError)
    }

    fn seal_bytes(&self, plaintext: &[u8], aad: &str) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::thread_rng().fill_bytes(&mut nonce);
        let ciphertext = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: aad.as_bytes(),
                },
            )
            .ok()?;
        let mut sealed = nonce.to_vec();
        sealed.extend(ciphertext);
        Some(sealed)
    }

    fn open_bytes(&self, sealed: &[u8], aad: &str) -> Result<Vec<u8>, SealError> {
        if sealed.len() < NONCE_LEN {
            return Err(SealError);
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        self.cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| SealError)
    }
}

fn associated_data(account: &AccountId, agent: AgentId) -> String {
    format!("toolserver/agent-secrets/v1/{account}/{agent}")
}

fn secret_data(account: &AccountId, name: &str) -> String {
    format!("toolserver/account-secrets/v1/{account}/{name}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sealed_secrets_open_only_for_their_row_and_key() {
        let mut config = json!({"provider": {"openai": {"apiKey": "sk-very-secret"}}});
        let secrets = Secrets::lift(&mut config, &Secrets::default()).unwrap();
        let account = AccountId::parse("acme").unwrap();
        let agent = AgentId::generate();
        let sealer = SecretBox::new(&[7; 32]);
        let sealed = sealer.seal(&secrets, &account, agent).unwrap();
        assert!(!sealed.windows(14).any(|w| w == b"sk-very-secret"));
        assert_eq!(
            sealer.open(Some(&sealed), &account, agent).unwrap(),
            secrets
        );
        assert!(sealer
            .open(Some(&sealed), &account, AgentId::generate())
            .is_err());
        let other = AccountId::parse("other").unwrap();
        assert!(sealer.open(Some(&sealed), &other, agent).is_err());
        assert!(SecretBox::new(&[8; 32])
            .open(Some(&sealed), &account, agent)
            .is_err());
        assert!(sealer.seal(&Secrets::default(), &account, agent).is_none());
    }

    #[test]
    fn account_secrets_open_only_under_their_name() {
        let account = AccountId::parse("acme").unwrap();
        let sealer = SecretBox::new(&[7; 32]);
        let sealed = sealer
            .seal_account_secret("tok-123", &account, "API_KEY")
            .unwrap();
        assert!(!sealed.windows(7).any(|w| w == b"tok-123"));
        assert_eq!(
            sealer
                .open_account_secret(&sealed, &account, "API_KEY")
                .unwrap(),
            "tok-123"
        );
        assert!(sealer
            .open_account_secret(&sealed, &account, "OTHER")
            .is_err());
        let other = AccountId::parse("other").unwrap();
        assert!(sealer
            .open_account_secret(&sealed, &other, "API_KEY")
            .is_err());
    }
}
