//! Cross-origin access for browser pages on other origins.

use clap::Args;

/// Cross-origin access.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Cross-origin access")]
pub struct CorsConfig {
    /// Origins allowed to call the API (`scheme://host[:port]`), or `*` for
    /// any. Empty: none.
    #[arg(long, env = "TOOLSERVER_CORS_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub cors_allowed_origins: Vec<String>,
    /// Methods allowed cross-origin.
    #[arg(
        long,
        env = "TOOLSERVER_CORS_ALLOWED_METHODS",
        value_delimiter = ',',
        default_value = "GET,POST,PATCH,PUT,DELETE"
    )]
    pub cors_allowed_methods: Vec<String>,
    /// Request headers allowed cross-origin.
    #[arg(
        long,
        env = "TOOLSERVER_CORS_ALLOWED_HEADERS",
        value_delimiter = ',',
        default_value = "authorization,content-type,x-request-id,idempotency-key"
    )]
    pub cors_allowed_headers: Vec<String>,
    /// Let pages send credentials (cookies); the bearer token needs none, so
    /// off by default; refused with `*`.
    #[arg(
        long,
        env = "TOOLSERVER_CORS_ALLOW_CREDENTIALS",
        default_value_t = false
    )]
    pub cors_allow_credentials: bool,
    /// Seconds a browser may cache a preflight answer.
    #[arg(long, env = "TOOLSERVER_CORS_MAX_AGE_SECS", default_value_t = 600)]
    pub cors_max_age_secs: u64,
}
