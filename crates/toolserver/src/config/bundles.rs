//! Where uploaded bundles are kept: a directory, or an S3 bucket.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use toolserver_domain::Secret;
use toolserver_harness::runner_call::RunnerCallSettings;

use super::parse::secret;
use super::units::secs;

/// Which bundle store backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BundleBackend {
    /// Files under `TOOLSERVER_BUNDLE_DIR`.
    Fs,
    /// An S3 bucket (AWS or S3-compatible).
    S3,
}

/// Bundle store settings.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Bundles")]
pub struct BundleConfig {
    /// `fs` (files under `TOOLSERVER_BUNDLE_DIR`) or `s3` (an S3 bucket, AWS
    /// or S3-compatible).
    #[arg(
        long,
        env = "TOOLSERVER_BUNDLE_STORE",
        value_enum,
        default_value = "fs"
    )]
    pub bundle_store: BundleBackend,
    /// Directory of the filesystem store. Unset: `<data dir>/bundles`.
    #[arg(long, env = "TOOLSERVER_BUNDLE_DIR")]
    pub bundle_dir: Option<PathBuf>,
    /// HMAC key signing the filesystem store's download links. Unset:
    /// generated once and kept in `<data dir>/bundle-url.key`.
    #[arg(
        long,
        env = "TOOLSERVER_BUNDLE_URL_SECRET",
        hide_env_values = true,
        value_parser = secret(1)
    )]
    pub bundle_url_secret: Option<Secret>,
    /// Lifetime of signed bundle links, in seconds.
    #[arg(
        long,
        env = "TOOLSERVER_BUNDLE_URL_TTL_SECS",
        default_value_t = secs(RunnerCallSettings::DEFAULT.signed_url_ttl)
    )]
    pub bundle_url_ttl_secs: u64,
    /// Bytes of small bundles (those sent to runners inline) a server keeps
    /// in memory, so a call does not read its tool's bundle from the store
    /// and hash it again; bundles are addressed by content, so nothing kept
    /// goes stale. 0 reads every call's bundle.
    #[arg(long, env = "TOOLSERVER_BUNDLE_CACHE_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub bundle_cache_bytes: u64,
    /// S3 bucket; required with the `s3` store.
    #[arg(long, env = "TOOLSERVER_S3_BUCKET")]
    pub s3_bucket: Option<String>,
    /// Key prefix inside the bucket.
    #[arg(long, env = "TOOLSERVER_S3_PREFIX", default_value = "bundles/")]
    pub s3_prefix: String,
    /// Region.
    #[arg(long, env = "TOOLSERVER_S3_REGION", default_value = "us-east-1")]
    pub s3_region: String,
    /// Endpoint of an S3-compatible store. Unset: AWS.
    #[arg(long, env = "TOOLSERVER_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// Path-style addressing, needed by most S3-compatible stores.
    #[arg(long, env = "TOOLSERVER_S3_FORCE_PATH_STYLE", default_value_t = false)]
    pub s3_force_path_style: bool,
    /// Access key id of static credentials. Unset: the standard AWS
    /// credential chain (environment, profile, web identity, instance role).
    #[arg(long, env = "TOOLSERVER_S3_ACCESS_KEY_ID")]
    pub s3_access_key_id: Option<String>,
    /// Secret access key of the static credentials.
    #[arg(
        long,
        env = "TOOLSERVER_S3_SECRET_ACCESS_KEY",
        hide_env_values = true,
        value_parser = secret(1)
    )]
    pub s3_secret_access_key: Option<Secret>,
}
