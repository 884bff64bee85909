//! The MCP server at `/mcp`, and the MCP servers agents use.

use clap::Args;
use toolserver_api::mcp::McpSettings;
use toolserver_harness::tools::ListTimings;

use super::parse::{http_url, within};
use super::units::{millis, secs};

/// The MCP server at `/mcp`, and agents' MCP servers.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "MCP")]
pub struct McpConfig {
    /// Seconds an MCP task may work, and is kept, from its creation
    /// (`ttlMs`).
    #[arg(
        long,
        env = "TOOLSERVER_MCP_TASK_TTL_SECS",
        default_value_t = secs(McpSettings::DEFAULT.task_ttl),
        value_parser = within::<u64>(1..)
    )]
    pub mcp_task_ttl_secs: u64,
    /// Longest poll interval an MCP task suggests, in milliseconds
    /// (`pollIntervalMs`: half the task's age, at least half the inline
    /// window).
    #[arg(
        long,
        env = "TOOLSERVER_MCP_TASK_POLL_MS",
        default_value_t = millis(McpSettings::DEFAULT.task_poll_interval),
        value_parser = within::<u64>(1..)
    )]
    pub mcp_task_poll_ms: u64,
    /// Milliseconds a call of a client that takes tasks may take and still
    /// answer inline; one still running then becomes a task (0: at once, for
    /// every such call of an uploaded tool).
    #[arg(
        long,
        env = "TOOLSERVER_MCP_TASK_INLINE_MS",
        default_value_t = millis(McpSettings::DEFAULT.task_inline_window)
    )]
    pub mcp_task_inline_ms: u64,
    /// Tools per `tools/list` page.
    #[arg(
        long,
        env = "TOOLSERVER_MCP_PAGE_SIZE",
        default_value_t = McpSettings::DEFAULT.page_size,
        value_parser = within::<u32>(1..)
    )]
    pub mcp_page_size: u32,
    /// `Host` values `/mcp` accepts. Empty: any, since every request needs a
    /// token (DNS rebinding gains nothing).
    #[arg(long, env = "TOOLSERVER_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub mcp_allowed_hosts: Vec<String>,
    /// Authorization servers the OAuth protected-resource metadata names.
    /// Empty: the JWT issuer when it is an http(s) URL,
    /// else this server's public origin.
    #[arg(
        long,
        env = "TOOLSERVER_MCP_AUTHORIZATION_SERVERS",
        value_delimiter = ',',
        value_parser = http_url()
    )]
    pub mcp_authorization_servers: Vec<String>,
    /// Seconds an agent keeps an MCP server's tool list before asking again.
    #[arg(
        long,
        env = "TOOLSERVER_MCP_LIST_TTL_SECS",
        default_value_t = secs(ListTimings::DEFAULT_KEEP)
    )]
    pub mcp_list_ttl_secs: u64,
    /// Milliseconds a save or a turn waits for an MCP server's tool list
    /// (the servers of one agent are listed together); a listing still
    /// running then goes on, up to the tool call deadline, and its tools
    /// are offered from the next turn.
    #[arg(
        long,
        env = "TOOLSERVER_MCP_LIST_WAIT_MS",
        default_value_t = millis(ListTimings::DEFAULT_WAIT)
    )]
    pub mcp_list_wait_ms: u64,
    /// Seconds an MCP server whose listing failed is not asked again.
    #[arg(
        long,
        env = "TOOLSERVER_MCP_LIST_RETRY_SECS",
        default_value_t = secs(ListTimings::DEFAULT_RETRY_AFTER)
    )]
    pub mcp_list_retry_secs: u64,
}
