//! The host side of a container: path mapping, starting processes, and
//! finding and killing a pod's processes by their working directory.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;
use tokio::sync::oneshot;

use super::FakeClusterOptions;

/// The image path of the worker.
const WORKER: &str = "/opt/toolserver/worker";
/// How long killing a pod's processes may take before it is given up.
const KILL_ROUNDS: usize = 200;
const KILL_ROUND: Duration = Duration::from_millis(10);

/// How a pod's first container runs on the host.
#[derive(Debug, Clone)]
pub(super) struct Container {
    node_binary: PathBuf,
    worker_dir: PathBuf,
    /// The pod's `/tmp`, also every process's working directory.
    tmp: PathBuf,
    /// The pod's `/cache`.
    cache: PathBuf,
    /// The container's environment, mapped.
    env: Vec<(String, String)>,
}

impl Container {
    /// Creates the pod's directories for the container spec `spec` of a pod
    /// at address `ip` (what a `status.podIP` field reference resolves to).
    pub(super) fn new(
        options: &FakeClusterOptions,
        name: &str,
        uid: &str,
        ip: &str,
        spec: &Value,
    ) -> io::Result<Self> {
        let tmp = options.root.join("pods").join(uid).join("tmp");
        let cache = options.root.join("claims").join(name).join("cache");
        std::fs::create_dir_all(&tmp)?;
        std::fs::create_dir_all(&cache)?;
        let mut container = Self {
            node_binary: options.node_binary.clone(),
            worker_dir: options.worker_dir.clone(),
            tmp: tmp.canonicalize()?,
            cache: cache.canonicalize()?,
            env: Vec::new(),
        };
        container.env = spec["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|var| {
                let name = var["name"].as_str()?;
                let field = var["valueFrom"]["fieldRef"]["fieldPath"].as_str();
                let value = match field {
                    Some("status.podIP") => ip.to_owned(),
                    _ => container.map(var["value"].as_str().unwrap_or_default()),
                };
                Some((name.to_owned(), value))
            })
            .collect();
        Ok(container)
    }

    /// The pod's `/tmp` on the host.
    pub(super) fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// Rewrites a container path (or any string starting with one) to the host.
    pub(super) fn map(&self, value: &str) -> String {
        let mounts = [
            (WORKER, &self.worker_dir),
            ("/tmp", &self.tmp),
            ("/cache", &self.cache),
        ];
        for (from, to) in mounts {
            if let Some(rest) = value.strip_prefix(from) {
                if rest.is_empty() || rest.starts_with('/') {
                    return format!("{}{rest}", to.to_string_lossy());
                }
            }
        }
        value.to_owned()
    }

    /// The command for `argv` run in the container, or `None` for an empty one.
    pub(super) fn command(&self, argv: &[String]) -> Option<Command> {
        let mut argv = argv.iter().map(|arg| self.map(arg));
        let program = argv.next()?;
        let program = if Path::new(&program).file_name() == Some("node".as_ref()) {
            self.node_binary.clone()
        } else {
            PathBuf::from(program)
        };
        let mut command = Command::new(program);
        command
            .args(argv)
            .env_clear()
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .current_dir(&self.tmp)
            .kill_on_drop(true);
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        Some(command)
    }

    /// Starts the container's main process, `argv` without a leading `tini`,
    /// writing its output to `log`. Dropping the returned sender kills it.
    pub(super) fn start_main(
        &self,
        argv: &[String],
        log: &Path,
    ) -> io::Result<Option<oneshot::Sender<()>>> {
        let is_tini = |init: &String| Path::new(init).file_name() == Some("tini".as_ref());
        let argv = match argv {
            [init, dashes, rest @ ..] if is_tini(init) && dashes == "--" => rest,
            [init, rest @ ..] if is_tini(init) => rest,
            _ => argv,
        };
        let Some(mut command) = self.command(argv) else {
            return Ok(None);
        };
        let log = File::create(log)?;
        command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let mut child = command.spawn()?;
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            tokio::select! {
                _ = child.wait() => {}
                _ = stopped => {
                    let _ = child.kill().await;
                }
            }
        });
        Ok(Some(stop))
    }
}

/// The processes side of a pod.
#[derive(Debug)]
pub(super) struct PodRuntime {
    pub(super) container: Container,
    /// The main process's output.
    pub(super) log: PathBuf,
    /// Dropped to kill the main process.
    pub(super) main: Option<oneshot::Sender<()>>,
    /// The pod's address.
    pub(super) ip: String,
}

impl PodRuntime {
    /// Kills the main process and answers the directory to clear of the rest.
    pub(super) fn stop(&mut self) -> PathBuf {
        self.main = None;
        self.container.tmp().to_path_buf()
    }
}

/// SIGKILLs every process whose working directory is inside `dir`, until none
/// is left (a process may fork while it is being killed).
pub(super) fn kill_all_in(dir: &Path) {
    for _ in 0..KILL_ROUNDS {
        let pids = processes_in(dir);
        if pids.is_empty() {
            return;
        }
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--"])
            .args(pids.iter().map(u32::to_string))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        std::thread::sleep(KILL_ROUND);
    }
}

/// The live processes whose working directory is inside `dir`.
fn processes_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(root: &Path) -> Container {
        let options = FakeClusterOptions {
            node_binary: PathBuf::from("/usr/bin/true"),
            worker_dir: PathBuf::from("/srv/worker"),
            root: root.to_path_buf(),
        };
        let spec = json!({"env": [
            {"name": "SOCKET", "value": "/tmp/worker.sock"},
            {"name": "PLAIN", "value": "/tmpfile"},
            {"name": "FROM_FIELD", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ]});
        Container::new(&options, "pod-a", "uid-1", "127.244.0.9", &spec).expect("pod directories")
    }

    #[test]
    fn container_paths_map_on_component_boundaries() {
        let root = tempfile::tempdir().expect("temp dir");
        let container = container(root.path());
        let tmp = container.tmp().to_string_lossy().into_owned();
        assert!(tmp.ends_with("/pods/uid-1/tmp"), "{tmp}");
        assert_eq!(container.map("/tmp"), tmp);
        assert_eq!(container.map("/tmp/a/b"), format!("{tmp}/a/b"));
        assert_eq!(container.map("/tmpx"), "/tmpx");
        assert_eq!(
            container.map("/opt/toolserver/worker/main.js"),
            "/srv/worker/main.js"
        );
        assert!(container.map("/cache/x").ends_with("/claims/pod-a/cache/x"));
        assert_eq!(container.map("relative/tmp"), "relative/tmp");
        let env: Vec<&str> = container
            .env
            .iter()
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(env, ["SOCKET", "PLAIN", "FROM_FIELD"]);
        assert_eq!(container.env[0].1, format!("{tmp}/worker.sock"));
        assert_eq!(container.env[1].1, "/tmpfile");
        assert_eq!(container.env[2].1, "127.244.0.9");
    }

    #[tokio::test]
    async fn commands_see_only_the_container_environment() {
        let root = tempfile::tempdir().expect("temp dir");
        let container = container(root.path());
        let argv = ["sh", "-c", "pwd; env | sort"].map(str::to_owned);
        let output = container
            .command(&argv)
            .expect("a command")
            .output()
            .await
            .expect("run sh");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let tmp = container.tmp().to_string_lossy();
        assert!(stdout.starts_with(&format!("{tmp}\n")), "{stdout}");
        assert!(
            stdout.contains(&format!("SOCKET={tmp}/worker.sock\n")),
            "{stdout}"
        );
        assert!(stdout.contains("PATH="), "{stdout}");
        assert!(!stdout.contains("HOME="), "{stdout}");
    }
}
