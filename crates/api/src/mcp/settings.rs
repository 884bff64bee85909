//! The MCP server's settings.

use std::time::Duration;

/// Knobs of the MCP server; each one is a server setting.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// How long a task lives (and is kept) from its creation.
    pub task_ttl: Duration,
    /// The longest poll interval tasks suggest to their clients.
    pub task_poll_interval: Duration,
    /// A task-augmented call that ends within this long answers inline;
    /// only one that does not becomes a task. Zero: every such call does.
    pub task_inline_window: Duration,
    /// Tools per `tools/list` page.
    pub page_size: u32,
    /// `Host` values `/mcp` accepts; empty: any (requests need a token).
    pub allowed_hosts: Vec<String>,
    /// Authorization servers the protected-resource metadata names; empty:
    /// this server's own origin.
    pub authorization_servers: Vec<String>,
}

impl McpSettings {
    /// The settings' defaults.
    pub const DEFAULT: Self = Self {
        task_ttl: Duration::from_secs(3600),
        task_poll_interval: Duration::from_secs(1),
        task_inline_window: Duration::from_millis(250),
        page_size: 100,
        allowed_hosts: Vec::new(),
        authorization_servers: Vec::new(),
    };
}

impl Default for McpSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}
