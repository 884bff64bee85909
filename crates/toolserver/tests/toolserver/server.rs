//! The server as the tests start it: `toolserver serve`, the real binary,
//! on the test's database with a free port and a data directory of its own,
//! settings quick enough for tests, and one account's token; restartable
//! on the same port and directory.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::http::{free_port, hs256_token, post_json, wait_ready};
use toolserver_testsupport::server_env::inherited_settings;
use toolserver_testsupport::{tools, Reply, ScriptedModel};

const SECRET: &str = "crash-secret";
const JOB: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms ?? 100)); return { finished: input.job }; } };";

/// The URL of the test's own database (`pool`'s, on the server of
/// `DATABASE_URL`).
pub fn database_url(pool: &PgPool) -> String {
    let name = pool.connect_options().get_database().unwrap().to_owned();
    let mut url = url::Url::parse(&std::env::var("DATABASE_URL").unwrap()).unwrap();
    url.set_path(&name);
    url.to_string()
}

/// A data directory for one server, which runners (as `nobody`) can reach.
pub fn data_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Sends `child` SIGTERM and waits for it to exit, for at most 30 s.
pub async fn terminate(child: &mut Child) -> ExitStatus {
    let signalled = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    let waited = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the server did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A running `toolserver serve`; killed when dropped.
pub struct Server {
    /// The process.
    pub child: Child,
    /// Its address, e.g. `http://127.0.0.1:40123`.
    pub base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a test's servers share: the database, the data directory, the
/// port, and the account's token.
pub struct Setup {
    database_url: String,
    /// The servers' data directory.
    pub dir: tempfile::TempDir,
    port: u16,
    client: reqwest::Client,
    token: String,
}

impl Setup {
    /// Servers on `pool`'s database, as account `crash`.
    pub fn new(pool: &PgPool) -> Self {
        Self {
            database_url: database_url(pool),
            dir: data_dir(),
            port: free_port(),
            client: reqwest::Client::new(),
            token: hs256_token(SECRET, "crash"),
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
    pub async fn start(&self, poll_ms: u64) -> Server {
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

    /// POSTs `body` to `path` on `server`; the answer (panics unless 2xx).
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
        let schema = json!({"type": "object"});
        tools::upload(
            &self.client,
            &server.base,
            &self.token,
            name,
            source,
            schema,
        )
        .await
    }

    /// Invokes `tool` on `server` with `body`; the answer (panics unless 200).
    pub async fn invoke(&self, server: &Server, tool: &str, body: Value) -> Value {
        let response = tools::invoke(&self.client, &server.base, &self.token, tool, &body).await;
        let status = response.status();
        let answer: Value = response.json().await.unwrap();
        assert_eq!(status, 200, "{answer}");
        answer
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

    /// The detached turn `id` as `server` reports it.
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

/// Scripts the turn of [`Setup::detached_turn`]: both calls, a text, an
/// error for the injected status call, then `continuation`.
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
