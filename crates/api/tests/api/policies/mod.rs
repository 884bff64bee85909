//! Policies (Cedar) deciding which tool calls may run: saved and validated
//! against the account's tools, explained, layered (an agent's can only
//! narrow the account's), and enforced before every call on every path
//! (turns, direct invokes, MCP). What the modules share: the tools they
//! upload, saving policies, and reading denied calls off the ledger.

use serde_json::{json, Value};
use toolserver_testsupport::wait::until;

use crate::app::TestApp;
use crate::support::*;

mod enforce;
mod layers;
mod mcp;
mod save;

/// Returns its input.
const ECHO: &str = "export default { async execute(ctx, input) { return { echo: input }; } };";

/// The input schema of a refund: a whole `amount`.
fn amount_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"amount": {"type": "integer"}},
        "required": ["amount"],
    })
}

/// Uploads the echo tool as `name` of `account`, declaring `effects`
/// (`None`: undeclared, a side effect); its id.
async fn tool(app: &TestApp, account: &str, name: &str, effects: Option<&str>) -> String {
    let fields = match effects {
        Some(effects) => json!({ "effects": effects }),
        None => json!({}),
    };
    app.upload_declaring(account, (name, ECHO), amount_schema(), fields)
        .await
}

/// `PUT /policies` as `account`; the status and the answer.
async fn put(app: &TestApp, account: &str, policies: &str) -> (u16, Value) {
    app.request(
        reqwest::Method::PUT,
        "/policies",
        account,
        Some(json!({ "policies": policies })),
    )
    .await
}

/// Saves `policies` for `account`, asserting they were taken.
async fn save_policies(app: &TestApp, account: &str, policies: &str) {
    let (status, body) = put(app, account, policies).await;
    assert_eq!(status, 200, "{policies}: {body}");
}

/// `POST /policies/explain` as account A with `body`; the status and the
/// answer.
async fn explain(app: &TestApp, body: Value) -> (u16, Value) {
    app.request(
        reqwest::Method::POST,
        "/policies/explain",
        ACCOUNT_A,
        Some(body),
    )
    .await
}

/// The ledger's `denied` attempts of `account`'s tool `name`, once there
/// are `count` of them.
async fn denied(app: &TestApp, account: &str, name: &str, count: usize) -> Vec<Value> {
    let path = format!("/tool-calls?status=denied&tool={name}");
    until("the denied calls to reach the ledger", || async {
        let (_, page) = app
            .request(reqwest::Method::GET, &path, account, None)
            .await;
        page["toolCalls"].as_array().map_or(0, Vec::len) >= count
    })
    .await;
    let (_, page) = app
        .request(reqwest::Method::GET, &path, account, None)
        .await;
    page["toolCalls"].as_array().unwrap().clone()
}
