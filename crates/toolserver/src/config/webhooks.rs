//! Webhook posts the server must deliver (handoff announcements, channel
//! answers): attempts, backoff, deadline and how often due posts are looked
//! for; and how fresh a signed inbound channel webhook must be.

use clap::Args;
use toolserver_harness::webhooks::WebhookSettings;

use super::parse::within;
use super::units::millis;

/// Webhook delivery.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Webhook delivery")]
pub struct WebhooksConfig {
    /// Attempts at one webhook post before it is given up (and recorded as
    /// failed with its last error).
    #[arg(
        long,
        env = "TOOLSERVER_WEBHOOK_MAX_ATTEMPTS",
        default_value_t = WebhookSettings::DEFAULT.max_attempts,
        value_parser = within::<u32>(1..=100)
    )]
    pub webhook_max_attempts: u32,
    /// Milliseconds before a failed webhook post is tried again; each later
    /// wait doubles, up to `TOOLSERVER_WEBHOOK_MAX_RETRY_MS`.
    #[arg(
        long,
        env = "TOOLSERVER_WEBHOOK_RETRY_MS",
        default_value_t = millis(WebhookSettings::DEFAULT.first_retry),
        value_parser = within::<u64>(10..)
    )]
    pub webhook_retry_ms: u64,
    /// Longest wait, in milliseconds, between attempts at a webhook post.
    #[arg(
        long,
        env = "TOOLSERVER_WEBHOOK_MAX_RETRY_MS",
        default_value_t = millis(WebhookSettings::DEFAULT.max_retry),
        value_parser = within::<u64>(10..)
    )]
    pub webhook_max_retry_ms: u64,
    /// Milliseconds one attempt at a webhook post may take.
    #[arg(
        long,
        env = "TOOLSERVER_WEBHOOK_TIMEOUT_MS",
        default_value_t = millis(WebhookSettings::DEFAULT.timeout),
        value_parser = within::<u64>(100..)
    )]
    pub webhook_timeout_ms: u64,
    /// Milliseconds between a process's looks for webhook posts that are due.
    #[arg(
        long,
        env = "TOOLSERVER_WEBHOOK_POLL_MS",
        default_value_t = millis(WebhookSettings::DEFAULT.poll),
        value_parser = within::<u64>(10..)
    )]
    pub webhook_poll_ms: u64,
    /// Seconds a signed inbound channel request's timestamp (Slack's
    /// `X-Slack-Request-Timestamp`, a webhook channel's
    /// `X-Toolserver-Timestamp`) may be from the server's clock; older or
    /// newer requests are refused 401.
    #[arg(
        long,
        env = "TOOLSERVER_WEBHOOK_SIGNATURE_WINDOW_SECS",
        default_value_t = WebhookSettings::DEFAULT.signature_window.as_secs(),
        value_parser = within::<u64>(1..=86_400)
    )]
    pub webhook_signature_window_secs: u64,
}
