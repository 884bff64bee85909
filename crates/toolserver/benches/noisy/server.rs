//! The server under test and the accounts' way into it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Client, Url};
use serde_json::{json, Value};
use toolserver_testsupport::http::{free_port, hs256_token, post_json, wait_ready};
use toolserver_testsupport::server_env::inherited_settings;
use toolserver_testsupport::ScriptedModel;

use crate::plan::SECRET;

/// The server under test, its output (JSON log lines) in `log`.
pub(crate) struct Server {
    pub(crate) base: String,
    pub(crate) child: tokio::process::Child,
    pub(crate) log: PathBuf,
}

impl Server {
    pub(crate) async fn start(
        binary: &Path,
        database_url: &str,
        data_dir: &Path,
        max_live: usize,
    ) -> Self {
        let port = free_port();
        let log = data_dir.join("server.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let mut command = tokio::process::Command::new(binary);
        for name in inherited_settings() {
            command.env_remove(name);
        }
        let child = command
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("TOOLSERVER_BIND", format!("127.0.0.1:{port}"))
            .env("TOOLSERVER_METRICS_BIND", "127.0.0.1:0")
            .env("TOOLSERVER_DATA_DIR", data_dir)
            .env("TOOLSERVER_JWT_SECRET", SECRET)
            .env("TOOLSERVER_SECRETS_KEY", "11".repeat(32))
            .env("TOOLSERVER_OUTBOUND_ALLOW_PRIVATE", "true")
            .env("TOOLSERVER_RUNNER_MAX_LIVE", max_live.to_string())
            // Rates high enough never to slow B's loop: what stops A must be
            // the concurrency limits.
            .env("TOOLSERVER_ACCOUNT_CALLS_PER_MINUTE", "200000")
            .env("TOOLSERVER_ACCOUNT_CALL_BURST", "5000")
            .env("TOOLSERVER_ACCOUNT_TURNS_PER_MINUTE", "200000")
            .env("TOOLSERVER_ACCOUNT_TURN_BURST", "5000")
            .env("TOOLSERVER_LOG_FORMAT", "json")
            .env("RUST_LOG", "warn")
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        wait_ready(&Client::new(), &base).await;
        Self { base, child, log }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// Prints how many warnings and errors the server logged, and the most
    /// frequent of them.
    pub(crate) fn print_log_summary(&self) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut counts: HashMap<(String, String), u64> = HashMap::new();
        for line in text.lines() {
            let Ok(entry) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let level = entry["level"].as_str().unwrap_or("?").to_owned();
            let fields = &entry["fields"];
            let mut message = fields["message"].as_str().unwrap_or("?").to_owned();
            for detail in ["status", "cause", "error"] {
                if let Some(value) = fields.get(detail) {
                    message.push_str(&format!(" {detail}={value}"));
                }
            }
            let message: String = message.chars().take(200).collect();
            *counts.entry((level, message)).or_default() += 1;
        }
        let by_level = |level: &str| -> u64 {
            counts
                .iter()
                .filter(|((of, _), _)| of == level)
                .map(|(_, n)| n)
                .sum()
        };
        println!(
            "server log: {} warnings, {} errors",
            by_level("WARN"),
            by_level("ERROR")
        );
        let mut frequent: Vec<_> = counts.into_iter().collect();
        frequent.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        for ((level, message), n) in frequent.into_iter().take(6) {
            println!("  {n:>7} x {level} {message}");
        }
    }
}

/// The path of the server binary: `TOOLSERVER_BIN`, else this build's.
pub(crate) fn server_binary() -> PathBuf {
    toolserver_testsupport::bench::server_binary(env!("CARGO_BIN_EXE_toolserver"))
}

/// One account's way in: its token, ready as a header.
#[derive(Clone)]
pub(crate) struct Tenant {
    pub(crate) token: String,
    pub(crate) auth: HeaderValue,
}

impl Tenant {
    pub(crate) fn new(account: &str) -> Self {
        let token = hs256_token(SECRET, account);
        let auth = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
        Self { token, auth }
    }

    /// A JSON POST of `body` to `url` with this account's token.
    pub(crate) fn post(
        &self,
        client: &Client,
        url: &Url,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::RequestBuilder {
        client
            .post(url.clone())
            .header(AUTHORIZATION, self.auth.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body)
    }
}

/// Uploads tool `name` running `source` for `tenant`; its id.
pub(crate) async fn upload(
    client: &Client,
    base: &str,
    tenant: &Tenant,
    name: &str,
    source: &str,
) -> String {
    let answer = post_json(
        client,
        &format!("{base}/accounts/me/tools"),
        &tenant.token,
        json!({
            "name": name, "description": name, "inputSchema": {"type": "object"},
            "bundle": base64::engine::general_purpose::STANDARD.encode(source),
        }),
    )
    .await;
    answer["toolId"].as_str().unwrap().to_owned()
}

/// Creates an agent of `tenant` talking to `model` as `model_id`, with no
/// tools; its id.
pub(crate) async fn create_agent(
    client: &Client,
    base: &str,
    tenant: &Tenant,
    model: &ScriptedModel,
    model_id: &str,
) -> String {
    let answer = post_json(
        client,
        &format!("{base}/agents"),
        &tenant.token,
        json!({"name": model_id, "config": {
            "model": {"provider": "openai", "modelId": model_id},
            "provider": {"openai": {"baseUrl": model.base_url(), "apiKey": "bench"}},
            "tools": {},
            "onDisconnect": "cancel",
        }}),
    )
    .await;
    answer["agentId"].as_str().unwrap().to_owned()
}
