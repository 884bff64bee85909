//! MCP tasks outlive the server process a client polls: with two server
//! processes on one database, a task created through one is polled through
//! the other, which is killed and started again while the tool runs; the
//! runner's completion reaches the restarted process, and the official SDK
//! client sees the task complete there.

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::clients::client_dir;

use crate::server::{Server, Setup};

const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { slept: input.ms }; } };";

/// The SDK client's `command` against `server`'s `/mcp`, as `setup`'s account.
async fn mcp(setup: &Setup, server: &Server, command: &[&str]) -> Value {
    let output = tokio::process::Command::new("node")
        .arg("bin/mcp.mjs")
        .args(command)
        .current_dir(client_dir("mcp"))
        .env("MCP_URL", format!("{}/mcp", server.base))
        .env("MCP_TOKEN", setup.token())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| {
        panic!(
            "{err}: {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_task_is_polled_to_completion_across_a_restart_of_the_server_polled(pool: PgPool) {
    let polled = Setup::new(&pool);
    let runs = Setup::new(&pool);
    // Runner pings may go unanswered for as long as the restart takes; two
    // servers share the test database's connections with other tests.
    let patient = ("TOOLSERVER_RUNNER_LIVENESS_TIMEOUT_MS", "15000");
    let pool_size = ("TOOLSERVER_DB_MAX_CONNECTIONS", "4");
    let mut polled_server = polled.start_with(50, &[patient, pool_size]).await;
    // The runner's callbacks go to the polled process, the one restarted.
    let running_server = runs
        .start_with(
            50,
            &[
                ("TOOLSERVER_PUBLIC_URL", &polled_server.base),
                patient,
                pool_size,
            ],
        )
        .await;
    runs.upload_tool(&running_server, "slow", SLOW).await;

    // Long enough that the restarted server answers before it ends, also on
    // a loaded machine: the first poll after the restart must see it working.
    let created = mcp(&runs, &running_server, &["task", "slow", r#"{"ms":12000}"#]).await;
    assert_eq!(created["status"], "working", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    let seen = mcp(&polled, &polled_server, &["get", &id]).await;
    assert_eq!(seen["status"], "working", "{seen}");

    polled_server.child.kill().unwrap();
    polled_server.child.wait().unwrap();
    drop(polled_server);
    let polled_server = polled.start_with(50, &[patient, pool_size]).await;

    let waited = mcp(&polled, &polled_server, &["wait", &id]).await;
    assert_eq!(waited["task"]["status"], "completed", "{waited}");
    assert_eq!(
        waited["task"]["result"]["structuredContent"],
        json!({"slept": 12000}),
        "{waited}"
    );
    assert_eq!(waited["seen"][0], "working", "{waited}");
}
