//! The project's own clients under `clients/` (the AI SDK checks, the MCP
//! clients, the CLI, the browser page), which tests run with Node or Python.

use std::path::PathBuf;

/// The directory of client `name`, e.g. `clients/mcp`.
pub fn client_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../clients")
        .join(name)
}
