//! The async tools the turns call (JS ESM bundles uploaded once per run)
//! and the agent that enables them with `async: true`.

use base64::Engine;
use serde_json::{json, Map, Value};

use crate::api::Api;
use crate::model::MODEL_ID;
use crate::plan::ToolKind;
use crate::ChaosError;

const SLEEP: &str = "const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));\n";

/// The bundle of `kind`: every tool waits `input.delayMs`; the failing one
/// then throws, the heartbeating one pings every 500 ms meanwhile (where
/// the server offers `ctx.asyncTool.heartbeat`; elsewhere it just waits).
fn bundle(kind: ToolKind) -> String {
    let body = match kind {
        ToolKind::Quick | ToolKind::Slow => {
            "await sleep(input.delayMs);\n    return { call: input.call, kind: KIND };".to_owned()
        }
        ToolKind::Fail => {
            "await sleep(input.delayMs);\n    throw new Error(`planned failure of ${input.call}`);"
                .to_owned()
        }
        ToolKind::Beat => "const until = Date.now() + input.delayMs;
    let step = 0;
    while (Date.now() < until) {
      try {
        await ctx.asyncTool?.heartbeat?.({ step });
      } catch (err) {
        // A refused heartbeat must not fail the call.
      }
      step += 1;
      await sleep(Math.max(0, Math.min(500, until - Date.now())));
    }
    return { call: input.call, kind: KIND, steps: step };"
            .to_owned(),
    };
    format!(
        "{SLEEP}const KIND = {kind:?};\nexport default {{\n  async execute(ctx, input) {{\n    {body}\n  }},\n}};\n",
        kind = kind.tool_name()
    )
}

fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "call": {"type": "string"},
            "delayMs": {"type": "integer", "minimum": 0},
        },
        "required": ["call", "delayMs"],
    })
}

/// Uploads one tool per [`ToolKind`] through `base`, then creates the agent
/// (model at `model_url`) with all of them async; returns the agent id.
pub async fn create_agent(api: &Api, base: &str, model_url: &str) -> Result<String, ChaosError> {
    let mut tools = Map::new();
    for kind in ToolKind::ALL {
        let bundle = base64::engine::general_purpose::STANDARD.encode(bundle(kind));
        let created = api
            .post_ok(
                base,
                "/accounts/me/tools",
                &json!({
                    "name": kind.tool_name(),
                    "description": format!("Chaos trial tool {}.", kind.tool_name()),
                    "inputSchema": input_schema(),
                    "bundle": bundle,
                }),
            )
            .await?;
        let id = created["toolId"]
            .as_str()
            .ok_or_else(|| ChaosError::Setup(format!("a tool without toolId: {created}")))?;
        tools.insert(id.to_owned(), json!({"async": true}));
    }
    let agent = api
        .post_ok(
            base,
            "/agents",
            &json!({"name": "chaos", "config": {
                "model": {"provider": "openai", "modelId": MODEL_ID},
                "provider": {"openai": {"baseUrl": model_url}},
                "systemPrompt": "Chaos trials.",
                "maxSteps": 8,
                "tools": tools,
            }}),
        )
        .await?;
    agent["agentId"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| ChaosError::Setup(format!("an agent without agentId: {agent}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundle_is_an_esm_module_with_a_default_execute() {
        for kind in ToolKind::ALL {
            let source = bundle(kind);
            assert!(source.contains("export default {"), "{source}");
            assert!(source.contains("async execute(ctx, input)"), "{source}");
            assert!(source.contains(kind.tool_name()), "{source}");
        }
        assert!(bundle(ToolKind::Fail).contains("throw new Error"));
        assert!(bundle(ToolKind::Beat).contains("ctx.asyncTool?.heartbeat?.({ step })"));
    }
}
