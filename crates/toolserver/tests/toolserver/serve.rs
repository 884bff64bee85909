//! The real binary on its embedded defaults, as `make run` starts it: a
//! relative data directory, a private Postgres, the development token, local
//! runners; then SIGTERM shuts it down cleanly.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

#[tokio::test]
async fn serve_on_embedded_defaults_runs_a_tool_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
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
    let started = Instant::now();
    while client.get(format!("{base}/readyz")).send().await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "server did not come up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let token = std::fs::read_to_string(dir.path().join(".toolserver/dev-token")).unwrap();
    let source = "export default { execute(ctx, input) { return { hello: input.name, cwd: process.cwd() }; } };";
    let created: Value = client
        .post(format!("{base}/accounts/me/tools"))
        .bearer_auth(&token)
        .json(&json!({
            "name": "hello", "description": "Says hello.", "inputSchema": {"type": "object"},
            "bundle": base64::engine::general_purpose::STANDARD.encode(source),
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tool = created["toolId"].as_str().unwrap();
    let result: Value = client
        .post(format!("{base}/accounts/me/tools/{tool}/invoke"))
        .bearer_auth(&token)
        .json(&json!({"input": {"name": "world"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(result["output"]["hello"], "world", "{result}");

    Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    let waited = Instant::now();
    let status = loop {
        if let Some(status) = server.try_wait().unwrap() {
            break status;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "server did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    let postmaster = dir.path().join(".toolserver/postgres/postmaster.pid");
    assert!(!postmaster.exists(), "the private cluster was stopped");
}
