//! The embedded default database: a private PostgreSQL cluster under the data
//! directory, reachable only through a unix socket inside it. Used when
//! `DATABASE_URL` is unset. It uses the machine's PostgreSQL binaries
//! (installing Debian's `postgresql` when none exist and we run as root), and
//! runs the server as the `postgres` user when we are root, since PostgreSQL
//! refuses to run as root. A cluster already running in the directory is reused.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// The database the server uses inside the private cluster.
const DATABASE: &str = "toolserver";
/// The cluster's superuser.
const SUPERUSER: &str = "toolserver";

/// A private cluster started (or found running) by this process.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    bin_dir: PathBuf,
    data_dir: PathBuf,
    run_as: Option<String>,
    started_here: bool,
}

impl EmbeddedPostgres {
    /// Initialises the cluster if needed, starts it if it is not running,
    /// creates the database, and returns the handle with its connection URL.
    /// `bin_dir` overrides the search for the PostgreSQL binaries.
    pub async fn start(data_root: &Path, bin_dir: Option<&Path>) -> anyhow::Result<(Self, String)> {
        let bin_dir = match bin_dir {
            Some(dir) => dir.to_owned(),
            None => find_bin_dir()?,
        };
        let data_dir = std::path::absolute(data_root.join("postgres"))?;
        let run_as = running_as_root().then(|| "postgres".to_owned());
        let mut cluster = Self {
            bin_dir,
            data_dir,
            run_as,
            started_here: false,
        };
        cluster.init_if_new()?;
        if !cluster.is_running() {
            cluster.pg_ctl_start()?;
            cluster.started_here = true;
        }
        let url = cluster.url(DATABASE);
        cluster.create_database().await?;
        Ok((cluster, url))
    }

    /// Stops the cluster if this process started it.
    pub fn stop(&self) {
        if !self.started_here {
            return;
        }
        let result = self
            .command("pg_ctl")
            .arg("stop")
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-m", "fast", "-w"])
            .output();
        match result {
            Ok(out) if out.status.success() => tracing::info!("embedded postgres stopped"),
            Ok(out) => {
                tracing::warn!(stderr = %String::from_utf8_lossy(&out.stderr), "pg_ctl stop failed")
            }
            Err(err) => tracing::warn!(error = %err, "pg_ctl stop failed"),
        }
    }

    fn url(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@localhost/{database}?host={}",
            self.data_dir.display()
        )
    }

    fn command(&self, program: &str) -> Command {
        let binary = self.bin_dir.join(program);
        match &self.run_as {
            Some(user) => {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", user, "--"]).arg(binary);
                cmd
            }
            None => Command::new(binary),
        }
    }

    fn init_if_new(&self) -> anyhow::Result<()> {
        if self.data_dir.join("PG_VERSION").exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.data_dir)
            .with_context(|| format!("creating {}", self.data_dir.display()))?;
        if let Some(user) = &self.run_as {
            chown_to(&self.data_dir, user)?;
        }
        tracing::info!(data_dir = %self.data_dir.display(), "initialising embedded postgres");
        run(self.command("initdb").arg("-D").arg(&self.data_dir).args([
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
        ]))
    }

    fn is_running(&self) -> bool {
        self.command("pg_ctl")
            .arg("status")
            .arg("-D")
            .arg(&self.data_dir)
            .output()
            .is_ok_and(|out| out.status.success())
    }

    fn pg_ctl_start(&self) -> anyhow::Result<()> {
        let options = format!(
            "-c listen_addresses='' -k {} -c max_connections=200",
            self.data_dir.display()
        );
        tracing::info!(data_dir = %self.data_dir.display(), "starting embedded postgres");
        run(self
            .command("pg_ctl")
            .arg("start")
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-l")
            .arg(self.data_dir.join("server.log"))
            .args(["-w", "-t", "60", "-o", &options]))
    }

    async fn create_database(&self) -> anyhow::Result<()> {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&self.url("postgres"))
            .await
            .context("connecting to the embedded postgres")?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
                .bind(DATABASE)
                .fetch_one(&mut conn)
                .await?;
        if !exists {
            sqlx::query(&format!("CREATE DATABASE {DATABASE}"))
                .execute(&mut conn)
                .await?;
        }
        Ok(())
    }
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn chown_to(path: &Path, user: &str) -> anyhow::Result<()> {
    let ids = |flag: &str| -> anyhow::Result<u32> {
        let out = Command::new("id").args([flag, user]).output()?;
        if !out.status.success() {
            bail!("no system user `{user}` to run postgres as");
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
    };
    std::os::unix::fs::chown(path, Some(ids("-u")?), Some(ids("-g")?))
        .with_context(|| format!("chown {} to {user}", path.display()))
}

/// Finds a directory holding `initdb` and `pg_ctl`: the newest `/usr/lib/postgresql/<version>/bin`, then `PATH`. When none
/// exists and we are root, installs Debian's `postgresql` package first.
fn find_bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = locate_bin_dir() {
        return Ok(dir);
    }
    if !running_as_root() {
        bail!("no PostgreSQL binaries found: install PostgreSQL or set DATABASE_URL");
    }
    tracing::warn!("no PostgreSQL binaries found; installing Debian's postgresql package");
    run(Command::new("apt-get").args(["update", "-q"]))?;
    run(Command::new("apt-get")
        .args([
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
            "postgresql",
        ])
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    locate_bin_dir().context("postgresql was installed but initdb is still missing")
}

fn locate_bin_dir() -> Option<PathBuf> {
    let has_tools = |dir: &Path| dir.join("initdb").exists() && dir.join("pg_ctl").exists();
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            has_tools(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Some(dir);
    }
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .find(|dir| has_tools(dir))
}
