//! Secrets the server can generate for local use: the development JWT secret
//! and the filesystem download-link key, each kept in the data directory so
//! that a restart does not invalidate tokens or links.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Context;
use rand::RngCore;

/// Reads the hex secret at `path`, creating it (mode 0600) with 32 random bytes first if absent.
pub fn load_or_create_secret(path: &Path) -> anyhow::Result<String> {
    if let Ok(existing) = std::fs::read_to_string(path) {
        let trimmed = existing.trim();
        if !trimmed.is_empty() {
            return Ok(trimmed.to_owned());
        }
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    let secret = hex::encode(bytes);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(secret.as_bytes())?;
    Ok(secret)
}

/// Mints an HS256 token for `account` that expires in `ttl_secs`.
pub fn mint_hs256(
    secret: &str,
    account_claim: &str,
    account: &str,
    ttl_secs: i64,
    issuer: Option<&str>,
    audience: Option<&str>,
) -> anyhow::Result<String> {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let mut claims = serde_json::Map::new();
    claims.insert(account_claim.into(), account.into());
    claims.insert("iat".into(), now.into());
    claims.insert("exp".into(), (now + ttl_secs).into());
    if let Some(iss) = issuer {
        claims.insert("iss".into(), iss.into());
    }
    if let Some(aud) = audience {
        claims.insert("aud".into(), aud.into());
    }
    Ok(jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )?)
}
