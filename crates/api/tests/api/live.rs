//! The server over real HTTP on loopback, with a scripted model to talk to,
//! for agent turns.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_api::admission::AdmittedRunnerCaps;
use toolserver_api::{ApiSettings, AppState};
use toolserver_harness::lifecycle::LifecycleSettings;
use toolserver_harness::HarnessSettings;
use toolserver_sandbox::{
    BudgetSettings, Executor, LocalExecutor, ReservationKey, RunnerBudget, WorkerClient,
};
use toolserver_testsupport::http::request_json;
use toolserver_testsupport::ScriptedModel;

use crate::chunk_stores::{Chunks, TestStore};
use crate::support::*;

/// Live runners of one account when admission does not say otherwise.
const TEST_ACCOUNT_RUNNERS: usize = 16;

/// Live runners of the app at most.
const TEST_MAX_RUNNERS: usize = 32;

pub struct LiveApp {
    _nats: Option<AbortOnDrop>,
    _chunks: Option<TestStore>,
    pub state: toolserver_api::AppState,
    pub base: String,
    pub client: reqwest::Client,
    pub model: ScriptedModel,
    pub pool: PgPool,
    executor: Arc<LocalExecutor>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

/// Stops a background task when the app goes away.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One response of a turn: status, headers and the parsed `data:` frames.
pub struct Turn {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
    /// Every JSON chunk, in order (the final `[DONE]` excluded).
    pub chunks: Vec<Value>,
}

impl Turn {
    pub fn types(&self) -> Vec<String> {
        self.chunks
            .iter()
            .map(|c| c["type"].as_str().unwrap().to_owned())
            .collect()
    }

    pub fn of_type(&self, kind: &str) -> Vec<&Value> {
        self.chunks.iter().filter(|c| c["type"] == kind).collect()
    }

    pub fn text(&self) -> String {
        self.of_type("text-delta")
            .iter()
            .map(|c| c["delta"].as_str().unwrap())
            .collect()
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// Default settings with a job loop and reaper quick enough for tests.
pub fn fast_lifecycle() -> HarnessSettings {
    HarnessSettings {
        lifecycle: LifecycleSettings {
            poll: Duration::from_millis(20),
            reaper_interval: Duration::from_millis(50),
            ..LifecycleSettings::default()
        },
        ..HarnessSettings::default()
    }
}

impl LiveApp {
    pub async fn start(pool: PgPool) -> Self {
        Self::start_with(pool, None, fast_lifecycle()).await
    }

    /// The app keeping turn chunks in `chunks`.
    pub async fn start_on(pool: PgPool, chunks: Chunks) -> Self {
        Self::start_on_settings(pool, chunks, ApiSettings::default(), fast_lifecycle()).await
    }

    /// The app keeping turn chunks in `chunks`, with settings of its own.
    pub async fn start_on_settings(
        pool: PgPool,
        chunks: Chunks,
        api: ApiSettings,
        mut settings: HarnessSettings,
    ) -> Self {
        let store = chunks.store().await;
        settings.streams.chunks = store.0.clone();
        let mut app = Self::start_full(pool, None, settings, None, api).await;
        app._chunks = Some(store);
        app
    }

    /// The app with its job loop and reaper idle, for tests that drive the
    /// lifecycle's storage by hand.
    pub async fn start_quiet(pool: PgPool) -> Self {
        let idle = Duration::from_secs(3600);
        let settings = HarnessSettings {
            lifecycle: LifecycleSettings {
                poll: idle,
                reaper_interval: idle,
                ..LifecycleSettings::default()
            },
            ..HarnessSettings::default()
        };
        Self::start_with(pool, None, settings).await
    }

    pub async fn start_with(
        pool: PgPool,
        tavily: Option<url::Url>,
        settings: HarnessSettings,
    ) -> Self {
        Self::start_full(pool, tavily, settings, None, ApiSettings::default()).await
    }

    /// The app with API settings of its own (e.g. CORS).
    pub async fn start_settings(pool: PgPool, api: ApiSettings, settings: HarnessSettings) -> Self {
        Self::start_full(pool, None, settings, None, api).await
    }

    /// The app with turns also taken over NATS, on `subject`, keeping
    /// turn chunks in `chunks`.
    pub async fn start_with_nats(
        pool: PgPool,
        nats: async_nats::Client,
        subject: &str,
        chunks: Chunks,
    ) -> Self {
        let store = chunks.store().await;
        let mut settings = fast_lifecycle();
        settings.streams.chunks = store.0.clone();
        let mut app = Self::start_full(
            pool,
            None,
            settings,
            Some(nats.clone()),
            ApiSettings::default(),
        )
        .await;
        app._chunks = Some(store);
        let turns = toolserver_api::nats::spawn_turns(app.state.clone(), nats, subject.to_owned())
            .await
            .unwrap();
        app._nats = Some(AbortOnDrop(turns));
        app
    }

    async fn start_full(
        pool: PgPool,
        tavily: Option<url::Url>,
        settings: HarnessSettings,
        nats: Option<async_nats::Client>,
        api: ApiSettings,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        // Runners post detached results under the public URL: this server.
        let settings = HarnessSettings {
            public_url: url::Url::parse(&base).unwrap(),
            ..settings
        };
        let bundles_dir = tempfile::tempdir().unwrap();
        let bundles = fs_store(bundles_dir.path()).await;
        let runners = tempfile::tempdir().unwrap();
        let executor = Arc::new(local_executor(
            runners.path(),
            Some(url::Url::parse(&base).unwrap()),
        ));
        // Held to a runner budget as the server holds its backend, with
        // each account's cap read from admission.
        let caps = Arc::new(AdmittedRunnerCaps::new(TEST_ACCOUNT_RUNNERS));
        let dyn_executor: Arc<dyn Executor> = Arc::new(RunnerBudget::new(
            executor.clone(),
            BudgetSettings {
                max_live: TEST_MAX_RUNNERS,
                queue_wait: Duration::from_millis(1000),
                queue_depth: 16,
            },
            caps.clone(),
        ));
        let harness = test_harness(
            pool.clone(),
            bundles.clone(),
            dyn_executor.clone(),
            tavily,
            settings,
        );
        let state = AppState::new(
            pool.clone(),
            bundles,
            dyn_executor,
            hs256_auth(),
            api,
            harness,
            nats.clone(),
        );
        caps.follow(state.admission());
        state.lifecycle().start_background();
        let app = toolserver_api::app(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            _nats: None,
            _chunks: None,
            state,
            base,
            client: reqwest::Client::new(),
            model: ScriptedModel::start().await,
            pool,
            executor,
            _dirs: (bundles_dir, runners),
        }
    }

    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        account: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        request_json(&self.client, method, &url, &token(account), body).await
    }

    /// Uploads a tool with `source` as its bundle and an input schema.
    pub async fn upload(&self, account: &str, name: &str, source: &str, schema: Value) -> String {
        let (status, body) = self
            .request(
                reqwest::Method::POST,
                "/accounts/me/tools",
                account,
                Some(json!({
                    "name": name,
                    "description": format!("the {name} tool"),
                    "inputSchema": schema,
                    "defaultConfig": {"greeting": "hi"},
                    "bundle": b64(source.as_bytes()),
                })),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["toolId"].as_str().unwrap().to_owned()
    }

    /// The config of an agent on the scripted model `model_id`.
    pub fn agent_config(&self, model_id: &str, tools: Value) -> Value {
        json!({
            "model": {"provider": "openai", "modelId": model_id},
            "provider": {"openai": {"apiKey": "sk-test-key", "baseUrl": self.model.base_url()}},
            "systemPrompt": "You are a test agent.",
            "tools": tools,
        })
    }

    /// Creates an agent and returns its id.
    pub async fn agent(&self, account: &str, model_id: &str, tools: Value) -> String {
        let (status, body) = self
            .request(
                reqwest::Method::POST,
                "/agents",
                account,
                Some(json!({"name": model_id, "config": self.agent_config(model_id, tools)})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["agentId"].as_str().unwrap().to_owned()
    }

    /// Starts a turn and returns the raw response.
    pub async fn start_turn(&self, account: &str, agent: &str, body: Value) -> reqwest::Response {
        self.client
            .post(format!("{}/agents/{agent}/chat", self.base))
            .bearer_auth(token(account))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Runs a turn to its end.
    pub async fn turn(&self, account: &str, agent: &str, body: Value) -> Turn {
        let response = self.start_turn(account, agent, body).await;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.unwrap();
        let chunks = if status == 200 {
            parse_frames(&body)
        } else {
            Vec::new()
        };
        Turn {
            status,
            headers,
            body,
            chunks,
        }
    }

    /// A user message turn on conversation `conversation`.
    pub async fn say(&self, account: &str, agent: &str, conversation: &str, text: &str) -> Turn {
        self.turn(account, agent, user_turn(conversation, text))
            .await
    }

    /// The runner backend.
    pub fn executor(&self) -> Arc<LocalExecutor> {
        self.executor.clone()
    }

    /// Whether `account`'s `tool` comes to have `count` calls in flight
    /// within 5 s.
    pub async fn comes_to_inflight(&self, account: &str, tool: &str, count: u64) -> bool {
        for _ in 0..100 {
            if self.inflight(account, tool).await == count {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// The worker's count of calls in flight for `account`'s `tool`.
    pub async fn inflight(&self, account: &str, tool: &str) -> u64 {
        let key = ReservationKey::new(
            toolserver_domain::AccountId::parse(account).unwrap(),
            toolserver_domain::ToolId::parse(tool).unwrap(),
        );
        let client = WorkerClient::new(self.executor.socket_path(&key));
        // No socket yet means no worker, so nothing in flight.
        match client.health().await {
            Ok(health) => health["inflight"].as_u64().unwrap(),
            Err(_) => 0,
        }
    }
}

/// The body `useChat` sends for a new user message.
pub fn user_turn(conversation: &str, text: &str) -> Value {
    json!({
        "id": conversation,
        "messages": [{"id": uuid::Uuid::new_v4().to_string(), "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message",
    })
}

/// Splits an SSE body into its JSON chunks, checking the framing: every
/// event is `data: <json>` (or a `:` comment), and the last is `[DONE]`.
pub fn parse_frames(body: &str) -> Vec<Value> {
    let events: Vec<&str> = body
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .collect();
    let mut chunks = Vec::new();
    let mut done = false;
    for event in events {
        if event.starts_with(':') {
            continue;
        }
        let data = event
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("not a data frame: {event:?}"));
        assert!(!done, "a frame after [DONE]: {data}");
        if data == "[DONE]" {
            done = true;
            continue;
        }
        chunks.push(serde_json::from_str(data).unwrap());
    }
    assert!(done, "the stream did not end with [DONE]:\n{body}");
    chunks
}

/// Tavily's HTTP API, scripted: answers `/search` after a delay and records
/// each request's authorization and body.
pub struct FakeTavily {
    pub url: url::Url,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
}

impl FakeTavily {
    pub async fn start(delay: Duration) -> Self {
        use axum::routing::post;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = axum::Router::new().route(
            "/search",
            post(move |headers: axum::http::HeaderMap, axum::Json(body): axum::Json<Value>| {
                let record = record.clone();
                async move {
                    let auth = headers["authorization"].to_str().unwrap().to_owned();
                    record.lock().unwrap().push((auth, body.clone()));
                    tokio::time::sleep(delay).await;
                    axum::Json(json!({"query": body["query"], "results": [{"title": body["query"], "url": "https://example.com"}]}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = url::Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, seen }
    }

    pub fn requests(&self) -> Vec<(String, Value)> {
        self.seen.lock().unwrap().clone()
    }
}
