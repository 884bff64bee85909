//! The project's own clients under `clients/` (the AI SDK checks, the MCP
//! clients, the CLI, the browser page), which tests run with Node or Python.

use std::path::PathBuf;

/// The directory of client `name`, e.g. `clients/mcp`.
pub fn client_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../clients")
        .join(name)
}

/// Where scripts/test-services.sh installs what the tests need:
/// `TOOLSERVER_TOOLS_ROOT`, else `$HOME/.cache/toolserver`.
pub fn tools_root() -> PathBuf {
    std::env::var_os("TOOLSERVER_TOOLS_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/toolserver")
        })
}

/// The Python of the virtualenv `name` (e.g. `mcp-python`, `oauth-server`)
/// that scripts/test-services.sh makes under [`tools_root`].
pub fn venv_python(name: &str) -> PathBuf {
    tools_root().join(name).join("bin/python")
}
