//! Limits on requests and uploaded tools.

use clap::Args;
use toolserver_api::ApiSettings;
use toolserver_domain::ToolLimits;

use super::parse::within;
use super::units::secs;

/// Request and upload limits.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Requests and uploads")]
pub struct LimitsConfig {
    /// Largest bundle in bytes, inclusive.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_BUNDLE_BYTES",
        default_value_t = ToolLimits::DEFAULT.max_bundle_bytes
    )]
    pub max_bundle_bytes: usize,
    /// Longest tool description, in characters.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_DESCRIPTION_CHARS",
        default_value_t = ToolLimits::DEFAULT.max_description_chars
    )]
    pub max_description_chars: usize,
    /// Largest `inputSchema`, in bytes of compact JSON.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_SCHEMA_BYTES",
        default_value_t = ToolLimits::DEFAULT.max_schema_bytes
    )]
    pub max_schema_bytes: usize,
    /// Largest `defaultConfig`, in bytes of compact JSON.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_CONFIG_BYTES",
        default_value_t = ToolLimits::DEFAULT.max_config_bytes
    )]
    pub max_config_bytes: usize,
    /// Longest value of one account secret, in characters.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_SECRET_CHARS",
        default_value_t = ToolLimits::DEFAULT.max_secret_chars,
        value_parser = within::<usize>(1..)
    )]
    pub max_secret_chars: usize,
    /// Most secrets one account may keep.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_SECRETS_PER_ACCOUNT",
        default_value_t = ToolLimits::DEFAULT.max_secrets,
        value_parser = within::<usize>(1..)
    )]
    pub max_secrets: usize,
    /// Largest OpenAPI document `POST /accounts/me/tools/import` fetches
    /// from a URL, in bytes (a document sent in the body is bounded by
    /// the request size limit).
    #[arg(
        long,
        env = "TOOLSERVER_MAX_IMPORT_BYTES",
        default_value_t = ToolLimits::DEFAULT.max_import_bytes,
        value_parser = within::<usize>(1..)
    )]
    pub max_import_bytes: usize,
    /// Largest request body in bytes. Unset: room for a base64 bundle of the
    /// largest size plus its manifest (about 1.6 MB with the defaults).
    #[arg(long, env = "TOOLSERVER_MAX_REQUEST_BYTES")]
    pub max_request_bytes: Option<usize>,
    /// Longest request URL, path and query, in bytes (414 past it).
    #[arg(
        long,
        env = "TOOLSERVER_MAX_URI_BYTES",
        default_value_t = ApiSettings::DEFAULT.max_uri_bytes
    )]
    pub max_uri_bytes: usize,
    /// Seconds a request may take to produce its response head (408
    /// after); streamed (SSE) responses are not cut.
    #[arg(
        long,
        env = "TOOLSERVER_REQUEST_TIMEOUT_SECS",
        default_value_t = secs(ApiSettings::DEFAULT.request_timeout)
    )]
    pub request_timeout_secs: u64,
    /// Seconds a direct call's `Idempotency-Key` is kept from the call's
    /// start: a repeat within them is answered with the stored result (or
    /// refused while the call runs); after them the key is free again.
    #[arg(
        long,
        env = "TOOLSERVER_INVOKE_IDEMPOTENCY_TTL_SECS",
        default_value_t = secs(ApiSettings::DEFAULT.invoke_idempotency_ttl),
        value_parser = within::<u64>(1..)
    )]
    pub invoke_idempotency_ttl_secs: u64,
    /// Page size of list routes when none is asked for.
    #[arg(
        long,
        env = "TOOLSERVER_DEFAULT_PAGE_SIZE",
        default_value_t = ApiSettings::DEFAULT.default_page_size
    )]
    pub default_page_size: u32,
    /// Largest page size of list routes.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_PAGE_SIZE",
        default_value_t = ApiSettings::DEFAULT.max_page_size
    )]
    pub max_page_size: u32,
}
