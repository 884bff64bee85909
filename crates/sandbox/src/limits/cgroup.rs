//! A cgroup per runner: found at start (v2, or the v1 `memory` and `pids`
//! hierarchies), made per runner under
//! `<server's cgroup>/toolserver/<server pid>/`, read for the kernel's
//! counts of OOM kills and refused forks. Groups of servers that are gone
//! are removed when the next one starts.

use std::path::{Path, PathBuf};

use super::RunnerLimits;

/// Which cgroup controllers the server may use for runners on this host.
#[derive(Debug, Clone, Default)]
pub struct CgroupSupport {
    memory: Option<Hierarchy>,
    pids: Option<Hierarchy>,
    /// Why a controller is missing, for the start-up log.
    missing: Vec<String>,
}

/// The directory runner cgroups of one controller go under.
#[derive(Debug, Clone)]
struct Hierarchy {
    parent: PathBuf,
    v2: bool,
}

impl Hierarchy {
    /// `toolserver/`, holding one group per server process.
    fn servers(&self) -> Option<&Path> {
        self.parent.parent()
    }
}

/// The directory under the server's own cgroup holding the runners' cgroups.
const RUNNERS_GROUP: &str = "toolserver";

impl CgroupSupport {
    /// Finds the controllers this process may delegate to runners; `None`
    /// for a host where the server must not touch cgroups at all.
    pub fn detect() -> Self {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            return Self::detect_v2(&own);
        }
        let mut support = Self::default();
        support.memory = support.v1_hierarchy(&own, "memory");
        support.pids = support.v1_hierarchy(&own, "pids");
        support
    }

    /// No cgroups: rlimits only.
    pub fn none(reason: &str) -> Self {
        Self {
            missing: vec![reason.to_owned()],
            ..Self::default()
        }
    }

    /// Removes the runner cgroups of server processes that are gone.
    pub fn sweep(&self) {
        for hierarchy in [&self.memory, &self.pids].into_iter().flatten() {
            let Some(entries) = hierarchy
                .servers()
                .and_then(|dir| std::fs::read_dir(dir).ok())
            else {
                continue;
            };
            for server in entries.flatten() {
                let gone = server
                    .file_name()
                    .to_str()
                    .and_then(|name| name.parse::<u32>().ok())
                    .is_some_and(|pid| !Path::new("/proc").join(pid.to_string()).exists());
                if gone {
                    remove_tree(&server.path());
                }
            }
        }
    }

    /// Removes runner `name`'s cgroups if no process is in them.
    pub fn remove(&self, name: &str) {
        for hierarchy in [&self.memory, &self.pids].into_iter().flatten() {
            let _ = std::fs::remove_dir(hierarchy.parent.join(name));
        }
    }

    /// Whether memory is held by a cgroup.
    pub fn has_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// Whether processes are counted by a cgroup.
    pub fn has_pids(&self) -> bool {
        self.pids.is_some()
    }

    /// Why controllers are missing, if any are.
    pub fn missing(&self) -> &[String] {
        &self.missing
    }

    fn detect_v2(own: &str) -> Self {
        let mut support = Self::default();
        let Some(path) = own.lines().find_map(|line| line.strip_prefix("0::")) else {
            support
                .missing
                .push("cgroup v2: this process's cgroup is unknown".into());
            return support;
        };
        let base = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
        let enable = |dir: &Path| {
            std::fs::write(dir.join("cgroup.subtree_control"), "+memory +pids").map_err(|err| {
                format!(
                    "cgroup v2: enabling memory and pids under {}: {err}",
                    dir.display()
                )
            })
        };
        let servers = base.join(RUNNERS_GROUP);
        let group = servers.join(std::process::id().to_string());
        let made = enable(&base)
            .and_then(|()| {
                std::fs::create_dir_all(&group)
                    .map_err(|err| format!("cgroup v2: creating {}: {err}", group.display()))
            })
            .and_then(|()| enable(&servers))
            .and_then(|()| enable(&group));
        match made {
            Ok(()) => {
                let hierarchy = Hierarchy {
                    parent: group,
                    v2: true,
                };
                support.memory = Some(hierarchy.clone());
                support.pids = Some(hierarchy);
            }
            Err(reason) => support.missing.push(format!(
                "{reason} (run the server in a cgroup delegated to it, e.g. a systemd unit with Delegate=yes)"
            )),
        }
        support
    }

    fn v1_hierarchy(&mut self, own: &str, controller: &str) -> Option<Hierarchy> {
        let mount = Path::new("/sys/fs/cgroup").join(controller);
        let path = own.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            controllers
                .split(',')
                .any(|name| name == controller)
                .then_some(path)
        });
        let Some(path) = path.filter(|_| mount.join("cgroup.procs").exists()) else {
            self.missing
                .push(format!("cgroup v1: no {controller} hierarchy mounted"));
            return None;
        };
        let parent = mount
            .join(path.trim_start_matches('/'))
            .join(RUNNERS_GROUP)
            .join(std::process::id().to_string());
        match std::fs::create_dir_all(&parent) {
            Ok(()) => Some(Hierarchy { parent, v2: false }),
            Err(err) => {
                self.missing
                    .push(format!("cgroup v1: creating {}: {err}", parent.display()));
                None
            }
        }
    }
}

/// One runner's cgroup(s), with its limits written.
#[derive(Debug)]
pub struct RunnerCgroup {
    /// The `cgroup.procs` files a worker joins before it starts.
    procs: Vec<PathBuf>,
    /// The file counting OOM kills (`oom_kill N`).
    oom_counter: Option<PathBuf>,
    /// The file counting refused forks (`max N`).
    fork_counter: Option<PathBuf>,
}

impl RunnerCgroup {
    /// Makes (or reuses) the cgroup of runner `name` and writes `limits`;
    /// done before every worker start, since an idle runner's cgroup is
    /// removed.
    pub fn create(
        support: &CgroupSupport,
        name: &str,
        limits: &RunnerLimits,
    ) -> std::io::Result<Self> {
        let mut group = Self {
            procs: Vec::new(),
            oom_counter: None,
            fork_counter: None,
        };
        if let Some(memory) = &support.memory {
            let dir = memory.parent.join(name);
            std::fs::create_dir_all(&dir)?;
            let bytes = limits.memory_bytes.to_string();
            if memory.v2 {
                std::fs::write(dir.join("memory.max"), &bytes)?;
                write_if_present(&dir.join("memory.swap.max"), "0")?;
                group.oom_counter = Some(dir.join("memory.events"));
            } else {
                std::fs::write(dir.join("memory.limit_in_bytes"), &bytes)?;
                write_if_present(&dir.join("memory.memsw.limit_in_bytes"), &bytes)?;
                group.oom_counter = Some(dir.join("memory.oom_control"));
            }
            group.procs.push(dir.join("cgroup.procs"));
        }
        if let Some(pids) = &support.pids {
            let dir = pids.parent.join(name);
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("pids.max"), limits.processes.to_string())?;
            group.fork_counter = Some(dir.join("pids.events"));
            if !group.procs.contains(&dir.join("cgroup.procs")) {
                group.procs.push(dir.join("cgroup.procs"));
            }
        }
        Ok(group)
    }

    /// The `cgroup.procs` files a new worker writes itself into.
    pub fn procs_files(&self) -> &[PathBuf] {
        &self.procs
    }

    /// The processes in the runner's cgroup.
    pub fn pids(&self) -> Vec<u32> {
        let Some(procs) = self.procs.first() else {
            return Vec::new();
        };
        std::fs::read_to_string(procs)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect()
    }

    /// Processes of the runner the kernel killed for memory, so far.
    pub fn oom_kills(&self) -> u64 {
        counter(self.oom_counter.as_deref(), "oom_kill")
    }

    /// Forks and thread starts the kernel refused at the process limit, so far.
    pub fn refused_forks(&self) -> u64 {
        counter(self.fork_counter.as_deref(), "max")
    }
}

/// Removes a cgroup and the groups below it (each must hold no process).
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Writes `value` to a control file the kernel may not have (swap
/// accounting is optional).
fn write_if_present(file: &Path, value: &str) -> std::io::Result<()> {
    match std::fs::write(file, value) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The value of `key` in a `key value` lines file, 0 if absent.
fn counter(file: Option<&Path>, key: &str) -> u64 {
    let Some(text) = file.and_then(|file| std::fs::read_to_string(file).ok()) else {
        return 0;
    };
    text.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(' ')?;
            (name == key).then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0)
}
