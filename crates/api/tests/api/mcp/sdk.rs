//! An account's tools through the SDK client: listing, paging, plain and
//! streaming calls with progress before the result, tool errors, and
//! OAuth discovery for a request without a token.

use serde_json::json;
use sqlx::PgPool;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

use super::{mcp, names, text_schema, ECHO, THROWS};

const COUNTS: &str = "export default { async *execute(ctx, input) { for (let i = 1; i <= input.to; i++) { yield { count: i }; await new Promise(r => setTimeout(r, 30)); } } };";

#[sqlx::test(migrations = "../../migrations")]
async fn the_sdk_lists_and_calls_an_accounts_tools_and_sees_progress_before_the_result(
    pool: PgPool,
) {
    let app = spawn_live_app(pool).await;
    app.upload(ACCOUNT_A, "echo", ECHO, text_schema()).await;
    app.upload(ACCOUNT_A, "counts", COUNTS, json!({"type": "object"}))
        .await;
    app.upload(ACCOUNT_A, "throws", THROWS, json!({"type": "object"}))
        .await;

    let listing = mcp(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(names(&listing), ["counts", "echo", "throws"], "{listing}");
    let echo = listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "echo")
        .unwrap();
    assert_eq!(echo["inputSchema"], text_schema(), "{echo}");
    assert_eq!(
        echo["_meta"]["io.modelcontextprotocol/tasks"]["taskSupport"], "optional",
        "{echo}"
    );

    let called = mcp(&app, Some(ACCOUNT_A), &["call", "echo", r#"{"text":"hi"}"#]).await;
    let result = &called["result"];
    assert_eq!(result["isError"], false, "{called}");
    assert_eq!(
        result["structuredContent"],
        json!({"echoed": "hi"}),
        "{called}"
    );
    assert_eq!(
        result["content"][0]["text"], r#"{"echoed":"hi"}"#,
        "{called}"
    );

    let streamed = mcp(&app, Some(ACCOUNT_A), &["call", "counts", r#"{"to":3}"#]).await;
    let progress = streamed["progress"].as_array().unwrap();
    assert_eq!(progress.len(), 3, "{streamed}");
    for (step, update) in progress.iter().enumerate() {
        assert_eq!(update["progress"], step + 1, "{streamed}");
        assert_eq!(update["message"], json!({"count": step + 1}).to_string());
    }
    assert_eq!(
        streamed["order"],
        json!(["progress", "progress", "progress", "result"]),
        "{streamed}"
    );
    assert_eq!(streamed["result"]["structuredContent"], json!({"count": 3}));

    // A failing tool and a bad input are tool errors the model can read;
    // an unknown tool is a protocol error.
    let failed = mcp(&app, Some(ACCOUNT_A), &["call", "throws", "{}"]).await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let text = failed["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("the tool broke"), "{failed}");
    let invalid = mcp(&app, Some(ACCOUNT_A), &["call", "echo", r#"{"text":5}"#]).await;
    assert_eq!(invalid["result"]["isError"], true, "{invalid}");
    let text = invalid["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("inputSchema"), "{invalid}");
    let unknown = mcp(&app, Some(ACCOUNT_A), &["call", "nope", "{}"]).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool: nope"),
        "{unknown}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn tools_list_pages_with_a_cursor(pool: PgPool) {
    let mut api = toolserver_api::ApiSettings::default();
    api.mcp.page_size = 2;
    let app = TestApp::live(pool).api(api).spawn().await;
    for name in ["a1", "a2", "a3", "a4", "a5"] {
        app.upload(ACCOUNT_A, name, ECHO, text_schema()).await;
    }
    let listing = mcp(&app, Some(ACCOUNT_A), &["list"]).await;
    assert_eq!(names(&listing), ["a1", "a2", "a3", "a4", "a5"], "{listing}");
    assert_eq!(listing["pages"], 3, "{listing}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn without_a_token_the_answer_points_at_the_protected_resource_metadata(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let refused = app
        .client
        .post(format!("{}/mcp", app.base()))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let challenge = refused.headers()["www-authenticate"].to_str().unwrap();
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", app.base());
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    let forged = app
        .client
        .post(format!("{}/mcp", app.base()))
        .bearer_auth("not-a-token")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    assert!(forged.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Bearer error=\"invalid_token\""));

    let discovered = mcp(&app, None, &["discover"]).await;
    assert_eq!(
        discovered["metadata"]["resource"],
        format!("{}/mcp", app.base()),
        "{discovered}"
    );
    let without = mcp(&app, None, &["list"]).await;
    assert_eq!(without["error"]["code"], 401, "{without}");
}
