//! The server processes: `toolserver serve`, each with its own port, data
//! directory and log file, started, SIGKILLed, restarted on the same port
//! and data directory, and stopped with SIGTERM at the end.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::api::Api;
use crate::procs;
use crate::ChaosError;

/// How long a (re)started server may take to answer `/readyz`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Variables of the harness's environment a server inherits; every other
/// one is cleared so stray `TOOLSERVER_*` settings cannot change the run.
const INHERITED: [&str; 4] = ["PATH", "HOME", "TMPDIR", "LANG"];

/// One server process slot: same port, data directory and settings across
/// restarts.
pub struct Server {
    /// A short name for reports (`a`, `b`).
    pub name: String,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    binary: PathBuf,
    data_dir: PathBuf,
    log: PathBuf,
    env: Vec<(String, String)>,
    child: Option<Child>,
    starts: usize,
}

impl Server {
    /// A server named `name` on `port` with its data directory and log
    /// under `root`; `env` is added to the settings that tie it to them.
    pub fn new(
        binary: &Path,
        name: &str,
        port: u16,
        root: &Path,
        env: &[(String, String)],
    ) -> Result<Self, ChaosError> {
        let data_dir = root.join(format!("server-{name}"));
        std::fs::create_dir_all(&data_dir)?;
        let base = format!("http://127.0.0.1:{port}");
        let mut settings = vec![
            ("TOOLSERVER_BIND".to_owned(), format!("127.0.0.1:{port}")),
            (
                "TOOLSERVER_METRICS_BIND".to_owned(),
                "127.0.0.1:0".to_owned(),
            ),
            ("TOOLSERVER_PUBLIC_URL".to_owned(), base.clone()),
            (
                "TOOLSERVER_DATA_DIR".to_owned(),
                data_dir.to_string_lossy().into_owned(),
            ),
        ];
        settings.extend(env.iter().cloned());
        Ok(Self {
            name: name.to_owned(),
            base,
            binary: binary.to_owned(),
            log: root.join(format!("server-{name}.log")),
            data_dir,
            env: settings,
            child: None,
            starts: 0,
        })
    }

    /// What the command lines of this server's runners contain: its data
    /// directory, where their roots live.
    pub fn runner_needle(&self) -> String {
        format!("{}/", self.data_dir.display())
    }

    /// Whether a process of this slot was started and not yet seen to end.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the server and waits until it answers `/readyz`.
    pub async fn start(&mut self, api: &Api) -> Result<(), ChaosError> {
        self.starts += 1;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        writeln!(
            log,
            "=== chaos: start {} of server {} ===",
            self.starts, self.name
        )?;
        let mut command = Command::new(&self.binary);
        command.arg("serve").env_clear();
        for name in INHERITED {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        let child = command.spawn().map_err(|err| {
            ChaosError::Setup(format!("starting {}: {err}", self.binary.display()))
        })?;
        self.child = Some(child);
        let started = Instant::now();
        while !api.ready(&self.base).await {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    self.child = None;
                    return Err(self.failed_start(&format!("exited with {status}")));
                }
            }
            if started.elapsed() > READY_TIMEOUT {
                self.kill().await?;
                return Err(self.failed_start("never became ready"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// SIGKILLs the process and reaps it.
    pub async fn kill(&mut self) -> Result<(), ChaosError> {
        if let Some(mut child) = self.child.take() {
            child.start_kill()?;
            child.wait().await?;
        }
        Ok(())
    }

    /// SIGTERMs the process and waits up to `grace` for it to exit, then
    /// SIGKILLs it. Returns whether it exited by itself.
    pub async fn stop(&mut self, grace: Duration) -> Result<bool, ChaosError> {
        let Some(mut child) = self.child.take() else {
            return Ok(true);
        };
        if let Some(pid) = child.id() {
            procs::signal(pid, "TERM").await;
        }
        match tokio::time::timeout(grace, child.wait()).await {
            Ok(status) => {
                status?;
                Ok(true)
            }
            Err(_) => {
                child.start_kill()?;
                child.wait().await?;
                Ok(false)
            }
        }
    }

    fn failed_start(&self, why: &str) -> ChaosError {
        ChaosError::Setup(format!(
            "server {} {why}; its log is {}",
            self.name,
            self.log.display()
        ))
    }
}
