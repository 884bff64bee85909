//! `/mcp` through the official MCP TypeScript SDK client (clients/mcp):
//! listing, plain and streaming calls, tool errors against protocol errors,
//! task-augmented calls polled to completion and cancelled (the runner call
//! stops), OAuth discovery, and tenancy. What the modules share: the tools
//! they upload, the SDK client run as a command, and a raw JSON-RPC request
//! of a given protocol revision.

use serde_json::{json, Value};

use toolserver_testsupport::clients::client_dir;

use crate::app::TestApp;
use crate::support::*;

mod annotations;
mod remote;
mod revisions;
mod sdk;
mod tasks;

const ECHO: &str =
    "export default { async execute(ctx, input) { return { echoed: input.text }; } };";

const THROWS: &str = "export default { async execute() { throw new Error('the tool broke'); } };";

pub(crate) const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { slept: input.ms }; } };";

/// Runs the SDK client's `command` as `account` (no token with `None`).
pub(crate) async fn mcp(app: &TestApp, account: Option<&str>, command: &[&str]) -> Value {
    let mut node = tokio::process::Command::new("node");
    node.arg("bin/mcp.mjs")
        .args(command)
        .current_dir(client_dir("mcp"))
        .env("MCP_URL", format!("{}/mcp", app.base()));
    if let Some(account) = account {
        node.env("MCP_TOKEN", token(account));
    }
    let output = node.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the MCP client crashed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| {
        panic!(
            "{err}: {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The names of the tools in a `tools/list` result, sorted.
pub(crate) fn names(listing: &Value) -> Vec<String> {
    let mut names: Vec<String> = listing["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listing}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

fn text_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

/// One JSON-RPC request of `version`, with `Mcp-Name: name` when given.
pub(crate) async fn revision_request(
    app: &TestApp,
    method: &str,
    params: Value,
    version: &str,
    name: Option<&str>,
) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    });
    let mut request = app
        .client
        .post(format!("{}/mcp", app.base()))
        .bearer_auth(token(ACCOUNT_A))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version)
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    let response = request
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert!(
        status == 200 || body.get("error").is_some(),
        "{status}: {body}"
    );
    body
}
