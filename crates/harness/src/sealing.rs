//! Credentials at rest: agent secrets are sealed with XChaCha20-Poly1305
//! under the server's secrets key, bound to their account and agent (the
//! associated data), so a sealed blob moved to another row does not open.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use toolserver_domain::{AccountId, AgentId, Secrets};

const NONCE_LEN: usize = 24;

/// A sealed blob could not be opened (wrong key, wrong row, or damaged).
#[derive(Debug, thiserror::Error)]
#[error("stored credentials could not be opened with the server's secrets key")]
pub struct SealError;

/// Seals and opens agent credentials.
#[derive(Clone)]
pub struct SecretBox {
    cipher: XChaCha20Poly1305,
}

impl SecretBox {
    /// A box using a 32-byte key.
    pub fn new(key: &[u8; 32]) -> Self {
        Self {
            cipher: XChaCha20Poly1305::new(key.into()),
        }
    }

    /// Seals `secrets` for one agent; `None` when there are none.
    pub fn seal(&self, secrets: &Secrets, account: &AccountId, agent: AgentId) -> Option<Vec<u8>> {
        if secrets.is_empty() {
            return None;
        }
        let plaintext = serde_json::to_vec(secrets).ok()?;
        let mut nonce = [0u8; NONCE_LEN];
        rand::thread_rng().fill_bytes(&mut nonce);
        let aad = associated_data(account, agent);
        let ciphertext = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &plaintext,
                    aad: aad.as_bytes(),
                },
            )
            .ok()?;
        let mut sealed = nonce.to_vec();
        sealed.extend(ciphertext);
        Some(sealed)
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
        if sealed.len() < NONCE_LEN {
            return Err(SealError);
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        let aad = associated_data(account, agent);
        let plaintext = self
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| SealError)?;
        serde_json::from_slice(&plaintext).map_err(|_| SealError)
    }
}

fn associated_data(account: &AccountId, agent: AgentId) -> String {
    format!("toolserver/agent-secrets/v1/{account}/{agent}")
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
}
