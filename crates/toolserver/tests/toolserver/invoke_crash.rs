//! A direct call under an `Idempotency-Key` whose server is killed by
//! SIGKILL while the tool body runs: once the dead process's liveness
//! lapses, a repeat on the restarted server is a 409 saying the outcome is
//! unknown, never a second run; another body under the key is still a 422.

use std::path::Path;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::wait::until;

use crate::server::{Server, Setup};

/// A liveness short enough for the dead process to be known quickly.
const SETTINGS: &[(&str, &str)] = &[("TOOLSERVER_PROCESS_LIVENESS_MS", "1000")];

/// Marks its start in its working directory, then never returns.
const HANGS: &str = "import { writeFileSync } from 'node:fs'; export default { async execute() { writeFileSync(process.cwd() + '/started-keyed', 'yes'); await new Promise(() => {}); } };";

/// Whether a file named `name` is anywhere under `dir`.
fn found(dir: &Path, name: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let path = entry.path();
        entry.file_name() == name || (path.is_dir() && found(&path, name))
    })
}

/// A keyed invoke of `tool` on `server`.
fn keyed(setup: &Setup, server: &Server, tool: &str, body: &Value) -> reqwest::RequestBuilder {
    setup
        .client()
        .post(format!("{}/accounts/me/tools/{tool}/invoke", server.base))
        .bearer_auth(setup.token())
        .header("idempotency-key", "crash-key")
        .json(body)
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_key_whose_server_died_mid_call_is_never_run_again(pool: PgPool) {
    let setup = Setup::new(&pool);
    let server = setup.start_with(50, SETTINGS).await;
    let tool = setup.upload_tool(&server, "hangs", HANGS).await;
    let body = json!({"input": {}, "timeoutMs": 60_000});
    let first = tokio::spawn(keyed(&setup, &server, &tool, &body).send());
    until("the tool body to run", || async {
        found(setup.dir.path(), "started-keyed")
    })
    .await;
    let mut server = server;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);
    assert!(
        first.await.unwrap().is_err(),
        "the first request got no answer"
    );

    let server = setup.start_with(50, SETTINGS).await;
    until("the repeat to say the outcome is unknown", || async {
        let response = keyed(&setup, &server, &tool, &body).send().await.unwrap();
        let status = response.status();
        let answer: Value = response.json().await.unwrap();
        assert_eq!(status, 409, "never run again: {answer}");
        answer["error"]["code"] == "idempotency_outcome_unknown"
    })
    .await;
    let other = keyed(&setup, &server, &tool, &json!({"input": {"other": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 422);
    let (state,): (String,) =
        sqlx::query_as("SELECT state FROM invoke_idempotency_keys WHERE key = 'crash-key'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(state, "running", "the dead process's claim stands");
}
