//! The detached lifecycle under the faults that used to break it: one
//! regression test per defect found in review (named `defectN_…`), and the
//! heartbeat route and deadlines. What the modules share: a tool that
//! answers after a delay, an agent that calls a tool async, and account A.

use serde_json::{json, Value};
use toolserver_domain::AccountId;
use toolserver_testsupport::Reply;

use crate::app::TestApp;
use crate::support::*;

mod groups_and_jobs;
mod heartbeats;
mod runner_faults;
mod settling;

/// Waits `delay` ms (from the input, default 100), then answers with the input.
const DELAYED: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms ?? 100)); return { done: input.name }; } };";

/// Uploads the tool `(name, source)`, scripts `model` with `replies`, and
/// creates an agent on `model` with the tool async (plus `settings`).
/// Returns the tool id and the agent id.
async fn async_agent(
    app: &TestApp,
    tool: (&str, &str),
    model: &str,
    settings: Value,
    replies: Vec<Reply>,
) -> (String, String) {
    async_agent_declaring(app, tool, json!({}), model, settings, replies).await
}

/// [`async_agent`] with `fields` (such as `effects`) added to the tool's
/// manifest.
async fn async_agent_declaring(
    app: &TestApp,
    tool: (&str, &str),
    fields: Value,
    model: &str,
    settings: Value,
    replies: Vec<Reply>,
) -> (String, String) {
    let tool = app
        .upload_declaring(ACCOUNT_A, tool, json!({"type": "object"}), fields)
        .await;
    app.model.script(model, replies);
    let mut config = json!({"async": true});
    if let (Some(config), Some(extra)) = (config.as_object_mut(), settings.as_object()) {
        config.extend(extra.clone());
    }
    let agent = app.agent(ACCOUNT_A, model, json!({ &tool: config })).await;
    (tool, agent)
}

fn account() -> AccountId {
    AccountId::parse(ACCOUNT_A).unwrap()
}

fn text_of(messages: &Value) -> String {
    messages.to_string()
}
