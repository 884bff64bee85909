//! `tools/list` states each tool's effects as MCP's annotations, read by
//! both official SDK clients (TypeScript and Python): `read` is read-only,
//! `idempotent` additive and repeatable, `side_effect` destructive; a tool
//! whose egress allow list is empty reaches no one, so its world is closed.

use serde_json::{json, Value};
use sqlx::PgPool;

use crate::app::spawn_live_app;
use crate::mcp_python::mcp_python;
use crate::support::*;

use super::{mcp, text_schema, ECHO};

/// The annotations of each listed tool, by name.
fn annotations(listing: &Value) -> Value {
    let tools = listing["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listing}"));
    Value::Object(
        tools
            .iter()
            .map(|tool| {
                let name = tool["name"].as_str().unwrap().to_owned();
                (name, tool["annotations"].clone())
            })
            .collect(),
    )
}

#[sqlx::test(migrations = "../../migrations")]
async fn both_sdks_see_each_tools_effects_as_its_annotations(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let declared = [
        ("reads", json!({"effects": "read"})),
        ("sets", json!({"effects": "idempotent"})),
        ("writes", json!({})),
        (
            "local",
            json!({"effects": "side_effect", "egress": {"allow": []}}),
        ),
    ];
    for (name, fields) in declared {
        app.upload_declaring(ACCOUNT_A, (name, ECHO), text_schema(), fields)
            .await;
    }
    let hints = |read_only: bool, destructive: bool, idempotent: bool, open_world: bool| {
        json!({
            "readOnlyHint": read_only,
            "destructiveHint": destructive,
            "idempotentHint": idempotent,
            "openWorldHint": open_world,
        })
    };
    let expected = json!({
        "reads": hints(true, false, true, true),
        "sets": hints(false, false, true, true),
        "writes": hints(false, true, false, true),
        "local": hints(false, true, false, false),
    });
    let typescript = mcp(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(annotations(&typescript), expected, "{typescript}");
    let python = mcp_python(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(annotations(&python), expected, "{python}");
}
