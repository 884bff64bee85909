//! The tool-call ledger over real HTTP: every path's calls on the record
//! (turns, direct invokes, MCP, detached), how each attempt ended, payloads
//! kept to their head with the whole's digest and length, the idempotency
//! key a turn's call runs under, and reading it back (filters, cursor
//! paging, tenancy).

use std::time::Duration;

use serde_json::Value;

use sqlx::PgPool;
use toolserver_harness::ledger::LedgerSettings;

use crate::app::{fast_lifecycle, TestApp};

mod paths;
mod payloads;
mod reading;
mod writing;

/// A served app whose ledger keeps `ledger`.
async fn app_with_ledger(pool: PgPool, ledger: LedgerSettings) -> TestApp {
    let mut harness = fast_lifecycle();
    harness.ledger = ledger;
    TestApp::builder(pool)
        .serve()
        .harness(harness)
        .spawn()
        .await
}

/// The account's attempts that `query` selects (`GET /tool-calls?query`),
/// once `count` of them have ended; panics if they do not within 20 s.
async fn ended_calls(app: &TestApp, account: &str, query: &str, count: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = app
            .request(
                reqwest::Method::GET,
                &format!("/tool-calls?{query}"),
                account,
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let calls = body["toolCalls"].as_array().unwrap().clone();
        let ended = calls.iter().filter(|c| c["status"] != "running").count();
        if ended >= count {
            return calls;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{ended} of {count} attempts ended: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
