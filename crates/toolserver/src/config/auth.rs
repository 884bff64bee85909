//! How bearer tokens are verified.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use toolserver_domain::Secret;
use url::Url;

use super::parse::secret;

/// The accepted token algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum JwtAlgorithm {
    /// HMAC-SHA256 with a shared secret.
    Hs256,
    /// RSA PKCS#1 v1.5 with SHA-256.
    Rs256,
    /// ECDSA P-256 with SHA-256.
    Es256,
}

/// Token verification settings.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Tokens")]
pub struct AuthConfig {
    /// The one accepted algorithm.
    #[arg(
        long,
        env = "TOOLSERVER_JWT_ALGORITHM",
        value_enum,
        default_value = "HS256"
    )]
    pub jwt_algorithm: JwtAlgorithm,
    /// HS256 shared secret. Unset with no `DATABASE_URL`: a development
    /// secret generated into `<data dir>/dev-jwt.key`.
    #[arg(
        long,
        env = "TOOLSERVER_JWT_SECRET",
        hide_env_values = true,
        value_parser = secret(1)
    )]
    pub jwt_secret: Option<Secret>,
    /// PEM file with the RS256/ES256 public key.
    #[arg(long, env = "TOOLSERVER_JWT_PUBLIC_KEY_FILE")]
    pub jwt_public_key_file: Option<PathBuf>,
    /// JWKS URL publishing RS256/ES256 keys, chosen by `kid`.
    #[arg(long, env = "TOOLSERVER_JWT_JWKS_URL")]
    pub jwt_jwks_url: Option<Url>,
    /// Least seconds between JWKS refetches on an unknown `kid`.
    #[arg(long, env = "TOOLSERVER_JWT_JWKS_REFRESH_SECS", default_value_t = 60)]
    pub jwt_jwks_refresh_secs: u64,
    /// Required `iss` claim.
    #[arg(long, env = "TOOLSERVER_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,
    /// Required `aud` claim.
    #[arg(long, env = "TOOLSERVER_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// Claim that names the account.
    #[arg(
        long,
        env = "TOOLSERVER_JWT_ACCOUNT_CLAIM",
        default_value = "account_id"
    )]
    pub jwt_account_claim: String,
    /// Seconds of clock skew tolerated on `exp` and `nbf`.
    #[arg(long, env = "TOOLSERVER_JWT_LEEWAY_SECS", default_value_t = 30)]
    pub jwt_leeway_secs: u64,
}
