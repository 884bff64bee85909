//! What each account may use (the defaults; an operator overrides them per
//! account), the operator routes that change them, and usage accounting.

use clap::Args;
use toolserver_api::auth::OperatorKey;
use toolserver_api::ApiSettings;
use toolserver_domain::{AccountLimits, Secret};

use super::parse::{secret, within};
use super::units::millis;

/// Per-account limits, the operator routes and usage accounting.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Accounts")]
pub struct AccountsConfig {
    /// Check every request that starts work against its account's limits;
    /// `false`: nothing is checked.
    #[arg(
        long,
        env = "TOOLSERVER_ADMISSION",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub admission: bool,
    /// Runner calls (direct invokes, MCP `tools/call`) an account may have in
    /// flight at once, per server process.
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_CONCURRENT_CALLS",
        default_value_t = AccountLimits::DEFAULT.concurrent_calls
    )]
    pub account_concurrent_calls: u32,
    /// Turns (chat SSE, WebSocket) an account may have streaming at once,
    /// per server process.
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_OPEN_TURNS",
        default_value_t = AccountLimits::DEFAULT.open_turns
    )]
    pub account_open_turns: u32,
    /// Detached turns (HTTP or NATS) an account may have unfinished.
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_PENDING_DETACHED",
        default_value_t = AccountLimits::DEFAULT.pending_detached
    )]
    pub account_pending_detached: u32,
    /// Runners an account may have alive at once, per server process; a
    /// call that needs one more waits in the runner queue, then is refused.
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_LIVE_RUNNERS",
        default_value_t = AccountLimits::DEFAULT.live_runners,
        value_parser = within::<u32>(1..)
    )]
    pub account_live_runners: u32,
    /// MCP tasks an account may have unsettled.
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_MCP_TASKS",
        default_value_t = AccountLimits::DEFAULT.mcp_tasks
    )]
    pub account_mcp_tasks: u32,
    /// Runner calls an account may start per minute, per server process (a
    /// token bucket).
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_CALLS_PER_MINUTE",
        default_value_t = AccountLimits::DEFAULT.calls_per_minute
    )]
    pub account_calls_per_minute: u32,
    /// Runner calls an account may start at once after a quiet spell.
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_CALL_BURST",
        default_value_t = AccountLimits::DEFAULT.call_burst
    )]
    pub account_call_burst: u32,
    /// Turns an account may start per minute, per server process (a token
    /// bucket).
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_TURNS_PER_MINUTE",
        default_value_t = AccountLimits::DEFAULT.turns_per_minute
    )]
    pub account_turns_per_minute: u32,
    /// Turns an account may start at once after a quiet spell.
    #[arg(
        long,
        env = "TOOLSERVER_ACCOUNT_TURN_BURST",
        default_value_t = AccountLimits::DEFAULT.turn_burst
    )]
    pub account_turn_burst: u32,
    /// Refusals of one account a second answered at once; past them each is
    /// held until its `Retry-After` (at most `TOOLSERVER_REFUSAL_HOLD_MS`),
    /// so clients that retry without waiting cannot flood the server with
    /// refusals.
    #[arg(long, env = "TOOLSERVER_ACCOUNT_PROMPT_REFUSALS", default_value_t = 20)]
    pub account_prompt_refusals: u32,
    /// The longest a refusal is held, in milliseconds.
    #[arg(long, env = "TOOLSERVER_REFUSAL_HOLD_MS", default_value_t = 1000)]
    pub refusal_hold_ms: u64,
    /// How often runner CPU and egress counts are added to the accounts'
    /// stored usage, in milliseconds; a killed server loses at most this
    /// much of its counts.
    #[arg(
        long,
        env = "TOOLSERVER_USAGE_FLUSH_MS",
        default_value_t = millis(ApiSettings::DEFAULT.usage_flush_interval),
        value_parser = within::<u64>(100..)
    )]
    pub usage_flush_ms: u64,
    /// The key of the operator routes (`/operator/...`), never a tenant
    /// token. Unset: the routes answer 403.
    #[arg(
        long,
        env = "TOOLSERVER_OPERATOR_KEY",
        hide_env_values = true,
        value_parser = secret(OperatorKey::MIN_BYTES)
    )]
    pub operator_key: Option<Secret>,
    /// Whether per-account metric series (admission refusals) carry an
    /// `account` label: one series per account, so mind the cardinality.
    #[arg(
        long,
        env = "TOOLSERVER_METRICS_ACCOUNT_LABEL",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub metrics_account_label: bool,
}
