//! How the ledger's writer keeps what it has not written yet: a call that
//! ends while its start is held is written once, finished, and a process
//! that stops writes everything it holds first.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_harness::ledger::LedgerSettings;

use super::{app_with_ledger, ended_calls};
use crate::support::*;

const ECHO: &str = "export default { async execute(ctx, input) { return input; } };";

#[sqlx::test(migrations = "../../migrations")]
async fn held_attempts_are_written_when_the_process_stops(pool: PgPool) {
    let app = app_with_ledger(
        pool,
        LedgerSettings {
            hold: Duration::from_secs(3600),
            ..LedgerSettings::DEFAULT
        },
    )
    .await;
    let tool = app
        .upload(ACCOUNT_A, "echo", ECHO, json!({"type": "object"}))
        .await;
    let (status, _) = app
        .invoke(ACCOUNT_A, &tool, json!({"input": {"n": 1}}))
        .await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, page) = app
        .request(reqwest::Method::GET, "/tool-calls", ACCOUNT_A, None)
        .await;
    assert_eq!(page["toolCalls"], json!([]), "the start is still held");

    app.state.lifecycle().shutdown(Duration::from_secs(5)).await;
    let calls = ended_calls(&app, ACCOUNT_A, "", 1).await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["status"], "ok");
    assert_eq!(calls[0]["output"]["text"], r#"{"n":1}"#);
    let (started, ended) = (&calls[0]["startedAt"], &calls[0]["endedAt"]);
    assert!(started.is_string() && ended.is_string(), "{}", calls[0]);
}
