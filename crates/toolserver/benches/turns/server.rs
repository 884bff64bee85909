//! A server under test, started from the binary with a scratch database.

use std::process::Stdio;

use base64::Engine;
use serde_json::{json, Value};
use toolserver_testsupport::bench::server_binary;
use toolserver_testsupport::http::{free_port, hs256_token, post_json, wait_ready};
use toolserver_testsupport::server_env::inherited_settings;

use crate::plan::{ECHO, GENEROUS_LIMITS, OPEN_TURNS, SECRET};

pub(crate) struct Server {
    pub(crate) base: String,
    /// Where the server's `/metrics` listens.
    metrics: String,
    pub(crate) child: tokio::process::Child,
    pub(crate) client: reqwest::Client,
    pub(crate) token: String,
}

impl Server {
    /// Starts a server on `data_dir` whose bundles are kept in `bundles`,
    /// shared by all the servers of a run, so each can run the tool.
    pub(crate) async fn start(
        database_url: &str,
        data_dir: &std::path::Path,
        bundles: &std::path::Path,
        env: &[(&str, &str)],
    ) -> Self {
        let port = free_port();
        let metrics_port = free_port();
        let mut command =
            tokio::process::Command::new(server_binary(env!("CARGO_BIN_EXE_toolserver")));
        for name in inherited_settings() {
            command.env_remove(name);
        }
        let child = command
            .arg("serve")
            .envs(env.iter().copied())
            .env("DATABASE_URL", database_url)
            .env("TOOLSERVER_BIND", format!("127.0.0.1:{port}"))
            .env(
                "TOOLSERVER_METRICS_BIND",
                format!("127.0.0.1:{metrics_port}"),
            )
            .env("TOOLSERVER_DATA_DIR", data_dir)
            .env("TOOLSERVER_BUNDLE_DIR", bundles)
            .env("TOOLSERVER_JWT_SECRET", SECRET)
            .env("TOOLSERVER_SECRETS_KEY", "11".repeat(32))
            .env("TOOLSERVER_OUTBOUND_ALLOW_PRIVATE", "true")
            // Four servers share one Postgres (100 connections by default).
            .env("TOOLSERVER_DB_MAX_CONNECTIONS", "20")
            // One account runs every turn, 1,000 at once at the most: its
            // limits are raised so admission checks every turn but refuses none.
            .envs(GENEROUS_LIMITS)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(OPEN_TURNS)
            .build()
            .unwrap();
        wait_ready(&client, &base).await;
        let token = hs256_token(SECRET, "bench");
        Self {
            base,
            metrics: format!("http://127.0.0.1:{metrics_port}/metrics"),
            child,
            client,
            token,
        }
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> Value {
        post_json(
            &self.client,
            &format!("{}{path}", self.base),
            &self.token,
            body,
        )
        .await
    }

    /// Uploads the echo tool ([`ECHO`]) to the bench's account; its id.
    pub(crate) async fn upload_echo(&self) -> String {
        let bundle = base64::engine::general_purpose::STANDARD.encode(ECHO);
        let tool = self
            .post(
                "/accounts/me/tools",
                json!({
                    "name": "echo", "description": "echo", "inputSchema": {"type": "object"},
                    "bundle": bundle,
                }),
            )
            .await;
        tool["toolId"].as_str().unwrap().to_owned()
    }

    /// Creates an agent on model `model_id` of the scripted model at
    /// `model_base_url` (OpenAI wire format) with `tools`; its id.
    pub(crate) async fn create_agent(
        &self,
        model_base_url: &str,
        model_id: &str,
        tools: Value,
    ) -> String {
        let config = json!({"name": model_id, "config": {
            "model": {"provider": "openai", "modelId": model_id},
            "provider": {"openai": {"baseUrl": model_base_url, "apiKey": "bench"}},
            "tools": tools,
        }});
        let agent = self.post("/agents", config).await;
        agent["agentId"].as_str().unwrap().to_owned()
    }

    /// CPU seconds the server spent building model requests so far: the
    /// sum of its `toolserver_model_request_cpu_seconds`.
    pub(crate) async fn model_request_cpu(&self) -> f64 {
        let text = self
            .client
            .get(&self.metrics)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix("toolserver_model_request_cpu_seconds_sum "))
            .map_or(0.0, |sum| sum.trim().parse().unwrap())
    }

    /// Resident and peak resident memory of the server, in MiB.
    pub(crate) fn memory(&self) -> (f64, f64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child.id().unwrap())).unwrap();
        let field = |name: &str| -> f64 {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            line.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<f64>()
                .unwrap()
                / 1024.0
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}
