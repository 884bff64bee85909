//! The real binary on its embedded defaults, as `make run` starts it: a
//! relative data directory, a private Postgres, the development token, local
//! runners; then SIGTERM shuts it down cleanly.

use std::process::{Command, Stdio};

use serde_json::json;
use toolserver_testsupport::http::{free_port, wait_ready};
use toolserver_testsupport::tools;

use crate::server::{data_dir, terminate};

#[tokio::test]
async fn serve_on_embedded_defaults_runs_a_tool_and_stops_on_sigterm() {
    let dir = data_dir();
    let port = free_port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_toolserver"))
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .args(["--metrics-bind", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", std::env::var("HOME").unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    wait_ready(&client, &base).await;
    let token = std::fs::read_to_string(dir.path().join(".toolserver/dev-token")).unwrap();
    let source = "export default { execute(ctx, input) { return { hello: input.name, cwd: process.cwd() }; } };";
    let schema = json!({"type": "object"});
    let tool = tools::upload(&client, &base, &token, "hello", source, schema).await;
    let input = json!({"input": {"name": "world"}});
    let result = tools::invoke(&client, &base, &token, &tool, &input).await;
    let result: serde_json::Value = result.json().await.unwrap();
    assert_eq!(result["output"]["hello"], "world", "{result}");

    let status = terminate(&mut server).await;
    assert!(status.success(), "{status}");
    let postmaster = dir.path().join(".toolserver/postgres/postmaster.pid");
    assert!(!postmaster.exists(), "the private cluster was stopped");
}
