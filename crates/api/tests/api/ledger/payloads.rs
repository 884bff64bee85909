//! Payloads on the record: a large output keeps its head with the digest
//! and length of the whole, never dropped for its size; the payload
//! retention drops the text and keeps the row.

use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use toolserver_api::ApiSettings;
use toolserver_harness::ledger::LedgerSettings;

use super::{app_with_ledger, ended_calls};
use crate::app::TestApp;
use crate::support::*;

const FIVE_MB: &str = "export default { async execute() { return 'x'.repeat(5 * 1024 * 1024); } };";

const ECHO: &str = "export default { async execute(ctx, input) { return input; } };";

#[sqlx::test(migrations = "../../migrations")]
async fn a_five_megabyte_output_is_recorded_as_its_head_digest_and_length(pool: PgPool) {
    let api = ApiSettings {
        max_output_bytes: 8 * 1024 * 1024,
        ..ApiSettings::default()
    };
    let app = TestApp::builder(pool).serve().api(api).spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "big", FIVE_MB, json!({"type": "object"}))
        .await;
    let (status, body) = app.invoke(ACCOUNT_A, &tool, json!({"input": {}})).await;
    assert_eq!(status, 200);
    let output = body["output"].as_str().unwrap();
    assert_eq!(output.len(), 5 * 1024 * 1024);
    let whole = Value::String(output.to_owned()).to_string();

    let calls = ended_calls(&app, ACCOUNT_A, "", 1).await;
    let recorded = &calls[0]["output"];
    assert_eq!(calls[0]["status"], "ok");
    assert_eq!(recorded["truncated"], true);
    assert_eq!(recorded["bytes"], whole.len());
    assert_eq!(
        recorded["sha256"],
        hex::encode(Sha256::digest(whole.as_bytes()))
    );
    let head = recorded["text"].as_str().unwrap();
    assert_eq!(head.len(), LedgerSettings::DEFAULT.payload_bytes);
    assert!(whole.starts_with(head));
    let input = &calls[0]["input"];
    assert_eq!(
        (input["text"].as_str(), input["truncated"].as_bool()),
        (Some("{}"), Some(false))
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_payload_retention_drops_the_text_and_keeps_the_row(pool: PgPool) {
    let app = app_with_ledger(
        pool,
        LedgerSettings {
            payload_retention: Duration::ZERO,
            keeper_interval: Duration::from_millis(50),
            ..LedgerSettings::DEFAULT
        },
    )
    .await;
    let tool = app
        .upload(ACCOUNT_A, "echo", ECHO, json!({"type": "object"}))
        .await;
    let (status, _) = app
        .invoke(ACCOUNT_A, &tool, json!({"input": {"secret": "s3cr3t"}}))
        .await;
    assert_eq!(status, 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let call = loop {
        let calls = ended_calls(&app, ACCOUNT_A, "", 1).await;
        if calls[0].get("payloadsPrunedAt").is_some() {
            break calls[0].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never pruned: {calls:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(call["status"], "ok");
    let whole = json!({"secret": "s3cr3t"}).to_string();
    for payload in [&call["input"], &call["output"]] {
        assert!(payload.get("text").is_none(), "{call}");
        assert_eq!(payload["bytes"], whole.len());
        assert_eq!(
            payload["sha256"],
            hex::encode(Sha256::digest(whole.as_bytes()))
        );
    }
    assert!(!call.to_string().contains("s3cr3t"));
}

const NUL_ERROR: &str =
    "export default { async execute() { throw new Error('bad\\u0000byte'); } };";

#[sqlx::test(migrations = "../../migrations")]
async fn an_error_holding_nul_is_recorded_and_holds_up_nothing(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let nul = app
        .upload(ACCOUNT_A, "nul", NUL_ERROR, json!({"type": "object"}))
        .await;
    let echo = app
        .upload(ACCOUNT_A, "echo", ECHO, json!({"type": "object"}))
        .await;
    let (_, failed) = app.invoke(ACCOUNT_A, &nul, json!({"input": {}})).await;
    assert!(
        failed["error"]["message"].as_str().unwrap().contains('\0'),
        "{failed}"
    );
    let (status, _) = app.invoke(ACCOUNT_A, &echo, json!({"input": {}})).await;
    assert_eq!(status, 200);

    let calls = ended_calls(&app, ACCOUNT_A, "", 2).await;
    let failed = calls.iter().find(|c| c["toolName"] == "nul").unwrap();
    assert_eq!(failed["status"], "tool_error");
    assert_eq!(failed["error"], "Error: bad\\u0000byte");
    let ok = calls.iter().find(|c| c["toolName"] == "echo").unwrap();
    assert_eq!(ok["status"], "ok");
}
