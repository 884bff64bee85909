//! Runner isolation at start, with the real binary. A server that cannot
//! isolate its runners refuses to start, unless it was told to run them
//! unisolated (`TOOLSERVER_RUNNER_ISOLATION=none`) or runs on the generated
//! development secret; a server whose runners are unisolated says so in its
//! log and in `GET /readyz`; the default, with bubblewrap, isolates them.
//! Bubblewrap is made unusable by pointing `TOOLSERVER_BWRAP_BINARY` at a
//! missing file or at one that cannot build a sandbox.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::http::{free_port, hs256_token, wait_ready};
use toolserver_testsupport::tools;

use crate::server::{data_dir, database_url};

const SECRET: &str = "isolation-secret";

/// A `toolserver serve` with its own data directory, its log (JSON lines)
/// and any error it exits with in one file.
struct Server {
    child: Child,
    base: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts the binary with only `PATH`, `HOME` and the listeners set
    /// besides `settings`: no database URL means the embedded database.
    fn spawn(settings: &[(&str, &str)]) -> Self {
        let dir = data_dir();
        let log = dir.path().join("server.log");
        let port = free_port();
        let output = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_toolserver"))
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", std::env::var("HOME").unwrap())
            .env("TOOLSERVER_BIND", format!("127.0.0.1:{port}"))
            .env("TOOLSERVER_METRICS_BIND", "127.0.0.1:0")
            .env("TOOLSERVER_DATA_DIR", dir.path().join("data"))
            .env("TOOLSERVER_LOG_FORMAT", "json")
            .envs(settings.iter().copied())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .spawn()
            .unwrap();
        Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
            _dir: dir,
        }
    }

    /// Waits (at most a minute) for the process to exit.
    fn exit_status(&mut self) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the server did not exit; it logged: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The messages the server logged at `level`.
    fn logged(&self, level: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["level"] == level)
            .map(|line| {
                line["fields"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }

    async fn readiness(&self) -> Value {
        let client = reqwest::Client::new();
        wait_ready(&client, &self.base).await;
        let answer = client
            .get(format!("{}/readyz", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        answer.json().await.unwrap()
    }
}

impl Drop for Server {
    /// Stops the server with SIGTERM, so that an embedded database it
    /// started stops with it; kills it if it does not stop in time.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bwrap` stand-ins that cannot isolate: missing, and one that cannot
/// build a sandbox (as where user namespaces are not allowed).
const UNUSABLE_BWRAP: [&str; 2] = ["/nonexistent/bwrap", "/usr/bin/false"];

#[sqlx::test(migrations = "../../migrations")]
async fn a_server_with_configured_tokens_and_no_usable_bubblewrap_refuses_to_start(pool: PgPool) {
    let database = database_url(&pool);
    for bwrap in UNUSABLE_BWRAP {
        let configured: [&[(&str, &str)]; 3] = [
            &[
                ("DATABASE_URL", &database),
                ("TOOLSERVER_JWT_SECRET", SECRET),
            ],
            // The embedded database, but a secret of its own.
            &[("TOOLSERVER_JWT_SECRET", SECRET)],
            // The development secret, but tokens from a named issuer.
            &[("TOOLSERVER_JWT_ISSUER", "https://issuer.example.com")],
        ];
        for settings in configured {
            let settings = [settings, &[("TOOLSERVER_BWRAP_BINARY", bwrap)]].concat();
            let mut server = Server::spawn(&settings);
            let status = server.exit_status();
            let said = server.log();
            assert!(!status.success(), "{settings:?}: {status}; {said}");
            for needed in [
                "refusing to start",
                bwrap,
                "install bubblewrap",
                "unprivileged user namespaces",
                "TOOLSERVER_RUNNER_ISOLATION=none",
            ] {
                assert!(said.contains(needed), "{settings:?}: {needed}: {said}");
            }
        }
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_explicitly_unisolated_server_starts_and_says_so_in_its_log_and_readyz(pool: PgPool) {
    let database = database_url(&pool);
    let server = Server::spawn(&[
        ("DATABASE_URL", &database),
        ("TOOLSERVER_JWT_SECRET", SECRET),
        ("TOOLSERVER_BWRAP_BINARY", "/nonexistent/bwrap"),
        ("TOOLSERVER_RUNNER_ISOLATION", "none"),
    ]);
    let ready = server.readiness().await;
    assert_eq!(ready["status"], "ok", "{ready}");
    let warnings = ready["warnings"].as_array().unwrap();
    assert!(
        warnings.len() == 1
            && warnings[0]
                .as_str()
                .unwrap()
                .contains("RUNNERS ARE NOT ISOLATED"),
        "{ready}"
    );
    let errors = server.logged("ERROR");
    for said in [
        "RUNNERS ARE NOT ISOLATED",
        "TOOLSERVER_RUNNER_ISOLATION=none",
    ] {
        assert!(
            errors.iter().any(|line| line.contains(said)),
            "{said}: {errors:?}"
        );
    }
}

#[tokio::test]
async fn a_development_server_without_bubblewrap_starts_unisolated_and_says_so() {
    for bwrap in UNUSABLE_BWRAP {
        let server = Server::spawn(&[("TOOLSERVER_BWRAP_BINARY", bwrap)]);
        let ready = server.readiness().await;
        let warnings = ready["warnings"].as_array().unwrap();
        assert!(
            warnings.len() == 1
                && warnings[0]
                    .as_str()
                    .unwrap()
                    .contains("RUNNERS ARE NOT ISOLATED"),
            "{bwrap}: {ready}"
        );
        let errors = server.logged("ERROR");
        assert!(
            errors
                .iter()
                .any(|line| line.contains("DEVELOPMENT ONLY: runners run unisolated")),
            "{bwrap}: {errors:?}"
        );
    }
}

/// Tries to read a host file and to reach the host's Postgres.
const PROBE: &str = "import { readFileSync } from 'node:fs';
import net from 'node:net';
const attempt = async (f) => { try { return 'ok: ' + await f(); } catch (e) { return 'refused: ' + (e.code ?? e.message); } };
const connect = () => new Promise((resolve, reject) => {
  const s = net.connect({ host: '127.0.0.1', port: 5432 });
  s.on('connect', () => { s.destroy(); resolve('connected'); });
  s.on('error', reject);
});
export default { async execute() {
  return { passwd: await attempt(() => readFileSync('/etc/passwd', 'utf8').length), postgres: await attempt(connect) };
} };";

#[sqlx::test(migrations = "../../migrations")]
async fn the_default_isolates_runners_with_bubblewrap_and_warns_of_nothing(pool: PgPool) {
    let database = database_url(&pool);
    let server = Server::spawn(&[
        ("DATABASE_URL", &database),
        ("TOOLSERVER_JWT_SECRET", SECRET),
    ]);
    let ready = server.readiness().await;
    assert_eq!(
        ready,
        json!({"status": "ok", "warnings": []}),
        "this test needs bubblewrap with network namespaces (make test-deps installs it); {}",
        server.log()
    );
    let client = reqwest::Client::new();
    let token = hs256_token(SECRET, "acct_probe");
    let schema = json!({"type": "object"});
    let tool = tools::upload(&client, &server.base, &token, "probe", PROBE, schema).await;
    let input = json!({"input": {}});
    let result = tools::invoke(&client, &server.base, &token, &tool, &input).await;
    assert_eq!(result.status(), 200);
    let result: Value = result.json().await.unwrap();
    assert_eq!(
        result["output"],
        json!({"passwd": "refused: ENOENT", "postgres": "refused: ECONNREFUSED"}),
        "{result}"
    );
}
