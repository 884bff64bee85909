//! Token verification: the configured secret, public key or JWKS URL, or
//! the development secret generated in the data directory.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use jsonwebtoken::{Algorithm, DecodingKey};
use toolserver_api::auth::{AuthSettings, Authenticator, JwksKeys, KeySource};

use crate::config::{AuthConfig, DatabaseConfig, JwtAlgorithm};
use crate::keys;

/// Lifetime of the development token printed at start.
const DEV_TOKEN_TTL_SECS: i64 = 30 * 24 * 3600;

/// Where the development JWT secret is kept.
pub fn dev_secret_path(db: &DatabaseConfig) -> PathBuf {
    db.data_dir.join("dev-jwt.key")
}

/// Whether tokens are verified with the generated development secret: HS256
/// with no secret, key file or JWKS URL, on the embedded database.
pub(super) fn uses_development_secret(config: &AuthConfig, db: &DatabaseConfig) -> bool {
    config.jwt_algorithm == JwtAlgorithm::Hs256
        && config.jwt_secret.is_none()
        && config.jwt_public_key_file.is_none()
        && config.jwt_jwks_url.is_none()
        && db.database_url.is_none()
}

/// Verifies tokens as configured.
pub(super) fn authenticator(
    config: &AuthConfig,
    db: &DatabaseConfig,
    on_dev_secret: bool,
) -> anyhow::Result<Authenticator> {
    let algorithm = match config.jwt_algorithm {
        JwtAlgorithm::Hs256 => Algorithm::HS256,
        JwtAlgorithm::Rs256 => Algorithm::RS256,
        JwtAlgorithm::Es256 => Algorithm::ES256,
    };
    let settings = AuthSettings {
        algorithm,
        issuer: config.jwt_issuer.clone(),
        audience: config.jwt_audience.clone(),
        account_claim: config.jwt_account_claim.clone(),
        leeway: Duration::from_secs(config.jwt_leeway_secs),
    };
    let keys = match (
        algorithm,
        &config.jwt_secret,
        &config.jwt_public_key_file,
        &config.jwt_jwks_url,
    ) {
        (Algorithm::HS256, Some(secret), None, None) => KeySource::Static(Arc::new(
            DecodingKey::from_secret(secret.expose().as_bytes()),
        )),
        (Algorithm::HS256, None, None, None) if on_dev_secret => {
            KeySource::Static(Arc::new(DecodingKey::from_secret(
                dev_secret(config, db)?.as_bytes(),
            )))
        }
        (Algorithm::HS256, _, _, _) => {
            bail!("HS256 needs TOOLSERVER_JWT_SECRET (and no public key or JWKS URL)")
        }
        (_, None, Some(path), None) => {
            let pem = std::fs::read(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let key = match algorithm {
                Algorithm::RS256 => DecodingKey::from_rsa_pem(&pem),
                _ => DecodingKey::from_ec_pem(&pem),
            }
            .with_context(|| format!("{} is not a PEM public key for {algorithm:?}", path.display()))?;
            KeySource::Static(Arc::new(key))
        }
        (_, None, None, Some(url)) => KeySource::Jwks(Arc::new(JwksKeys::new(
            url.clone(),
            reqwest_client()?,
            Duration::from_secs(config.jwt_jwks_refresh_secs),
        ))),
        _ => bail!(
            "{algorithm:?} needs exactly one of TOOLSERVER_JWT_PUBLIC_KEY_FILE or TOOLSERVER_JWT_JWKS_URL"
        ),
    };
    Ok(Authenticator::new(&settings, keys))
}

/// Generates (once) the development secret and prints a ready-to-use token.
fn dev_secret(config: &AuthConfig, db: &DatabaseConfig) -> anyhow::Result<String> {
    let secret = keys::load_or_create_secret(&dev_secret_path(db))?;
    let token = keys::mint_hs256(
        &secret,
        &config.jwt_account_claim,
        "dev",
        DEV_TOKEN_TTL_SECS,
        config.jwt_issuer.as_deref(),
        config.jwt_audience.as_deref(),
    )?;
    let token_path = db.data_dir.join("dev-token");
    std::fs::write(&token_path, &token)?;
    tracing::warn!(
        token_file = %token_path.display(),
        "DEVELOPMENT ONLY: no TOOLSERVER_JWT_SECRET is set, so a local secret was generated. \
         A token for account `dev` is in the token file: export TOKEN=$(cat {})",
        token_path.display()
    );
    Ok(secret)
}

fn reqwest_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()?)
}
