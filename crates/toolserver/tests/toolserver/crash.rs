//! Crash safety of detached turns, with the real binary killed by SIGKILL:
//! a continuation enqueued before the crash runs exactly once after the
//! restart, and a continuation cut off mid-run is run again and the turn
//! completes once.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::http::{free_port, hs256_token, post_json, wait_ready};
use toolserver_testsupport::server_env::inherited_settings;
use toolserver_testsupport::{Reply, ScriptedModel};

const SECRET: &str = "crash-secret";
const JOB: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms ?? 100)); return { finished: input.job }; } };";

pub struct Server {
    pub child: Child,
    pub base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Setup {
    database_url: String,
    pub dir: tempfile::TempDir,
    port: u16,
    client: reqwest::Client,
    token: String,
}

impl Setup {
    pub fn new(pool: &PgPool) -> Self {
        let name = pool.connect_options().get_database().unwrap().to_owned();
        let admin = std::env::var("DATABASE_URL").unwrap();
        let mut url = url::Url::parse(&admin).unwrap();
        url.set_path(&name);
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let port = free_port();
        let token = hs256_token(SECRET, "crash");
        Self {
            database_url: url.to_string(),
            dir,
            port,
            client: reqwest::Client::new(),
            token,
        }
    }

    /// The HTTP client of this setup.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// A token of this setup's account.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Starts the binary; `poll_ms` is how often it looks for continuations.
    async fn start(&self, poll_ms: u64) -> Server {
        self.start_with(poll_ms, &[]).await
    }

    /// [`Self::start`] with extra settings (they win over the defaults).
    pub async fn start_with(&self, poll_ms: u64, settings: &[(&str, &str)]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolserver"));
        for name in inherited_settings() {
            command.env_remove(name);
        }
        let child = command
            .arg("serve")
            .env("TOOLSERVER_METRICS_BIND", "127.0.0.1:0")
            .env("DATABASE_URL", &self.database_url)
            .env("TOOLSERVER_BIND", format!("127.0.0.1:{}", self.port))
            .env("TOOLSERVER_DATA_DIR", self.dir.path())
            .env("TOOLSERVER_JWT_SECRET", SECRET)
            .env("TOOLSERVER_SECRETS_KEY", "22".repeat(32))
            .env("TOOLSERVER_OUTBOUND_ALLOW_PRIVATE", "true")
            .env("TOOLSERVER_CONTINUATION_POLL_MS", poll_ms.to_string())
            .env("TOOLSERVER_JOB_CLAIM_MS", "2000")
            .env("TOOLSERVER_RUNNER_LIVENESS_TIMEOUT_MS", "2000")
            .env("TOOLSERVER_RUNNER_LIVENESS_INTERVAL_MS", "300")
            .env("TOOLSERVER_ASYNC_REAPER_MS", "100")
            .env("TOOLSERVER_TURN_LEASE_SECS", "3")
            .envs(settings.iter().copied())
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("TEST_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{}", self.port);
        wait_ready(&self.client, &base).await;
        Server { child, base }
    }

    pub async fn post(&self, server: &Server, path: &str, body: Value) -> Value {
        post_json(
            &self.client,
            &format!("{}{path}", server.base),
            &self.token,
            body,
        )
        .await
    }

    /// Uploads a tool named `name` whose bundle is `source`; its toolId.
    pub async fn upload_tool(&self, server: &Server, name: &str, source: &str) -> String {
        self.post(
            server,
            "/accounts/me/tools",
            json!({
                "name": name, "description": format!("the {name} tool"), "inputSchema": {"type": "object"},
                "bundle": base64::engine::general_purpose::STANDARD.encode(source),
            }),
        )
        .await["toolId"]
        .as_str()
        .unwrap()
        .to_owned()
    }

    /// Creates an agent `name` on `model`'s script of the same name, with
    /// `tools` as its tool config; its agentId.
    pub async fn agent(
        &self,
        server: &Server,
        name: &str,
        model: &ScriptedModel,
        tools: Value,
    ) -> String {
        self.post(
            server,
            "/agents",
            json!({"name": name, "config": {
                "model": {"provider": "openai", "modelId": name},
                "provider": {"openai": {"baseUrl": model.base_url()}},
                "tools": tools,
            }}),
        )
        .await["agentId"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Uploads the job tool, creates an agent on `model`, starts a detached
    /// turn that calls the tool twice, and returns its status id.
    pub async fn detached_turn(&self, server: &Server, model: &ScriptedModel) -> String {
        let tool = self.upload_tool(server, "job", JOB).await;
        let agent = self
            .agent(server, "crash", model, json!({ &tool: {"async": true} }))
            .await;
        let body = json!({"id": "conv-crash", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "run"}]}], "trigger": "submit-message"});
        self.post(server, &format!("/agents/{agent}/async"), body)
            .await["statusId"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub async fn status(&self, server: &Server, id: &str) -> Value {
        self.client
            .get(format!("{}/async/{id}", server.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

pub fn script(model: &ScriptedModel, continuation: Reply) {
    model.script(
        "crash",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "a"})).and_tool_call(
                "c2",
                "job",
                json!({"job": "b"}),
            ),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected async_status call"),
            continuation,
        ],
    );
}

pub async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Queued jobs, continued groups, and the most attempts of a queued job.
async fn outbox(pool: &PgPool) -> (i64, i64, i32) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM continuation_outbox), \
                (SELECT count(*) FROM dispatch_groups WHERE continued_at IS NOT NULL), \
                (SELECT COALESCE(max(attempts), 0) FROM continuation_outbox)",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_continuation_enqueued_before_a_crash_runs_once_after_restart(pool: PgPool) {
    let setup = Setup::new(&pool);
    let model = ScriptedModel::start().await;
    script(&model, Reply::text("Both finished."));
    // This server looks for continuations only every ten minutes.
    let mut server = setup.start(600_000).await;
    let id = setup.detached_turn(&server, &model).await;
    until("both completions and the group's continuation", || async {
        outbox(&pool).await.1 == 1
    })
    .await;
    assert_eq!(outbox(&pool).await, (1, 1, 0), "enqueued, not yet claimed");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    let server = setup.start(50).await;
    until("the turn to complete", || async {
        setup.status(&server, &id).await["status"] == "completed"
    })
    .await;
    assert_eq!(
        outbox(&pool).await,
        (0, 1, 0),
        "the job ran and left no row"
    );
    assert_eq!(model.request_count("crash"), 3, "one continuation pass");
    let answer = setup.status(&server, &id).await;
    assert!(
        answer["messages"].to_string().contains("Both finished."),
        "{answer}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_continuation_cut_off_by_a_crash_runs_again_and_completes_once(pool: PgPool) {
    let setup = Setup::new(&pool);
    let model = ScriptedModel::start().await;
    // The continuation's model pass hangs, so the crash lands mid-run.
    script(
        &model,
        Reply::text("never").delay_first(Duration::from_secs(600)),
    );
    let mut server = setup.start(50).await;
    let id = setup.detached_turn(&server, &model).await;
    until("the continuation's model pass", || async {
        model.request_count("crash") == 3
    })
    .await;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    script(&model, Reply::text("Finished after all."));
    let server = setup.start(50).await;
    until("the turn to complete", || async {
        setup.status(&server, &id).await["status"] == "completed"
    })
    .await;
    assert_eq!(outbox(&pool).await, (0, 1, 0));
    assert_eq!(
        model.request_count("crash"),
        4,
        "the cut-off continuation pass was asked again, once"
    );
    let answer = setup.status(&server, &id).await;
    let text = answer["messages"].to_string();
    assert!(text.contains("Finished after all."), "{answer}");
    assert!(!text.contains("never"), "{answer}");
    let settled: i64 =
        sqlx::query_scalar("SELECT count(*) FROM async_turns WHERE settle_event_id IS NOT NULL")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(settled, 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_first_pass_cut_off_by_a_crash_is_run_again_elsewhere(pool: PgPool) {
    let setup = Setup::new(&pool);
    let model = ScriptedModel::start().await;
    model.script(
        "crash",
        vec![Reply::text("never").delay_first(Duration::from_secs(600))],
    );
    let mut server = setup.start(50).await;
    let id = setup.detached_turn(&server, &model).await;
    until("the first model pass", || async {
        model.request_count("crash") == 1
    })
    .await;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    model.script("crash", vec![Reply::text("Answered after the crash.")]);
    let server = setup.start(50).await;
    until("the turn to complete", || async {
        setup.status(&server, &id).await["status"] == "completed"
    })
    .await;
    let answer = setup.status(&server, &id).await;
    let text = answer["messages"].to_string();
    assert!(text.contains("Answered after the crash."), "{answer}");
    assert!(!text.contains("never"), "{answer}");
    assert_eq!(model.request_count("crash"), 2);
    assert_eq!(outbox(&pool).await.0, 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn calls_launched_before_a_crash_fail_fast_and_their_group_continues_once(pool: PgPool) {
    let setup = Setup::new(&pool);
    let model = ScriptedModel::start().await;
    // The first pass launches both calls; the second pass (its answer to
    // the pending results) hangs, so the crash lands after the launch.
    model.script(
        "crash",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "a", "ms": 60000})).and_tool_call(
                "c2",
                "job",
                json!({"job": "b", "ms": 60000}),
            ),
            Reply::text("never").delay_first(Duration::from_secs(600)),
        ],
    );
    let mut server = setup.start(50).await;
    let id = setup.detached_turn(&server, &model).await;
    until("the second model pass", || async {
        model.request_count("crash") == 2
    })
    .await;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    model.script(
        "crash",
        // The launch pass's message died with the server: the continuation
        // restores its two calls (step 0), then tells their results (step 1).
        vec![
            Reply::error(500, "step 0 is the restored launch"),
            Reply::error(500, "step 1 is the injected results"),
            Reply::text("Both runners died."),
        ],
    );
    let server = setup.start(50).await;
    let started = Instant::now();
    until("the turn to complete", || async {
        setup.status(&server, &id).await["status"] == "completed"
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "settled within the liveness timeout, not the TTL"
    );
    let answer = setup.status(&server, &id).await;
    let text = answer["messages"].to_string();
    assert!(text.contains("Both runners died."), "{answer}");
    assert!(
        text.contains("no ping from the runner of this call was heard"),
        "{answer}"
    );
    let parts = answer["messages"].as_array().unwrap().last().unwrap()["parts"].clone();
    let restored: Vec<&Value> = parts
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "tool-job")
        .collect();
    assert_eq!(restored.len(), 2, "both lost calls are back: {parts}");
    assert!(restored
        .iter()
        .all(|p| p["output"]["status"] == "pending" && p["input"]["ms"] == 60000));
    assert_eq!(
        model.request_count("crash"),
        3,
        "the launch pass is not asked again; the group continues once"
    );
    assert_eq!(outbox(&pool).await, (0, 1, 0));
}
