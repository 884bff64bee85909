//! Cgroups of runners: found at start (v2, or the v1 `memory`, `pids`,
//! `cpu` and `cpuacct` hierarchies), made under
//! `<server's cgroup>/toolserver/<server pid>/`, read for the kernel's
//! counts of OOM kills and refused forks and for CPU time. Groups of
//! servers that are gone are removed when the next one starts.
//!
//! Memory and processes are held per runner. CPU is shared per account:
//! every account's runners go into one group of the account's (`ta-` and a
//! hash of its id), all with the same weight, so under contention each
//! account gets an equal share of CPU however many runners it has. Under v1
//! that group lives in the `cpu` hierarchy (`…/<server pid>/<account
//! group>`, the runner's processes in it directly, beside its own `memory`
//! and `pids` groups at `…/<server pid>/<runner>`) and in the `cpuacct`
//! one, where each runner has a group of its own inside it
//! (`…/<account group>/<runner>`, counting the runner's CPU time; where
//! the two hierarchies are mounted together, that group nests the runner
//! inside its account's for CPU weight as well); under v2
//! the runner's group lies inside its account's (`…/<server pid>/<account
//! group>/<runner>`) and counts its CPU time in `cpu.stat`. Account groups
//! are kept until the server exits, so their CPU time only grows.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use sha2::{Digest, Sha256};

use super::RunnerLimits;

/// How long a start-up sweep waits for the processes it killed to leave
/// their groups, so the groups can be removed.
const SWEEP_WAIT: Duration = Duration::from_secs(2);
/// How often it looks.
const SWEEP_POLL: Duration = Duration::from_millis(50);

/// Which cgroup controllers the server may use for runners on this host.
#[derive(Debug, Clone, Default)]
pub struct CgroupSupport {
    memory: Option<Hierarchy>,
    pids: Option<Hierarchy>,
    /// Where account groups get their CPU weight.
    cpu: Option<Hierarchy>,
    /// Where account groups' CPU time is read.
    cpuacct: Option<Hierarchy>,
    /// Why a memory or process controller is missing, for the start-up log.
    missing: Vec<String>,
    /// Why accounts do not get equal CPU shares, when they do not.
    cpu_missing: Option<String>,
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

    /// The group of `account_group`, made with its CPU weight (under v2
    /// also handing memory and processes down to its runners' groups).
    fn account_dir(&self, account_group: &str, weight: bool) -> std::io::Result<PathBuf> {
        let dir = self.parent.join(account_group);
        std::fs::create_dir_all(&dir)?;
        if self.v2 {
            std::fs::write(dir.join("cgroup.subtree_control"), "+memory +pids")?;
            if weight {
                std::fs::write(dir.join("cpu.weight"), V2_WEIGHT)?;
            }
        } else if weight {
            std::fs::write(dir.join("cpu.shares"), V1_SHARES)?;
        }
        Ok(dir)
    }

    /// The group of runner `name` of `account_group`, made.
    fn runner_dir(
        &self,
        account_group: &str,
        name: &str,
        weight: bool,
    ) -> std::io::Result<PathBuf> {
        let dir = if self.v2 {
            self.account_dir(account_group, weight)?.join(name)
        } else {
            self.parent.join(name)
        };
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }
}

/// The directory under the server's own cgroup holding the runners' cgroups.
const RUNNERS_GROUP: &str = "toolserver";

/// The CPU weight of every account group (the kernels' defaults: what
/// counts is that all are equal).
const V2_WEIGHT: &str = "100";
const V1_SHARES: &str = "1024";

impl CgroupSupport {
    /// Finds the controllers this process may delegate to runners.
    pub fn detect() -> Self {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            return Self::detect_v2(&own);
        }
        let mut support = Self::default();
        for (controller, slot) in [("memory", &mut support.memory), ("pids", &mut support.pids)] {
            match v1_hierarchy(&own, controller) {
                Ok(hierarchy) => *slot = Some(hierarchy),
                Err(reason) => support.missing.push(reason),
            }
        }
        let cpu = v1_hierarchy(&own, "cpu").and_then(|hierarchy| {
            let shares = hierarchy.parent.join("cpu.shares");
            match std::fs::write(&shares, V1_SHARES) {
                Ok(()) => Ok(hierarchy),
                Err(err) => Err(format!("cgroup v1: writing {}: {err}", shares.display())),
            }
        });
        support.cpuacct = v1_hierarchy(&own, "cpuacct").ok();
        match cpu {
            Ok(hierarchy) => support.cpu = Some(hierarchy),
            Err(reason) => support.cpu_missing = Some(reason),
        }
        support
    }

    /// No cgroups: rlimits only, and no CPU shares per account.
    pub fn none(reason: &str) -> Self {
        Self {
            missing: vec![reason.to_owned()],
            cpu_missing: Some(reason.to_owned()),
            ..Self::default()
        }
    }

    fn hierarchies(&self) -> impl Iterator<Item = &Hierarchy> {
        [&self.memory, &self.pids, &self.cpu, &self.cpuacct]
            .into_iter()
            .flatten()
    }

    /// Removes the runner cgroups of server processes that are gone, killing
    /// first what still runs in them: a worker such a server forked as it
    /// died, or a process a tool started that outlived its worker.
    pub fn sweep(&self) {
        let gone: Vec<PathBuf> = self
            .hierarchies()
            .filter_map(|hierarchy| hierarchy.servers())
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flat_map(|entries| entries.flatten())
            .filter(|server| {
                server
                    .file_name()
                    .to_str()
                    .and_then(|name| name.parse::<u32>().ok())
                    .is_some_and(|pid| !Path::new("/proc").join(pid.to_string()).exists())
            })
            .map(|server| server.path())
            .collect();
        let mut left = BTreeSet::new();
        for dir in &gone {
            processes_in(dir, &mut left);
        }
        let killed = left
            .into_iter()
            .filter_map(Pid::from_raw)
            .filter(|&pid| rustix::process::kill_process(pid, Signal::KILL).is_ok())
            .count();
        if killed > 0 {
            tracing::warn!(
                killed,
                "killed processes a former server left in its runner cgroups"
            );
        }
        let deadline = std::time::Instant::now() + SWEEP_WAIT;
        loop {
            for dir in &gone {
                remove_tree(dir);
            }
            let emptied = gone.iter().all(|dir| !dir.exists());
            if emptied || killed == 0 || std::time::Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(SWEEP_POLL);
        }
    }

    /// Removes the cgroups of runner `name` of `account` if no process is
    /// in them (its account's group stays).
    pub fn remove(&self, account: &str, name: &str) {
        self.remove_in(&account_group(account), name);
    }

    /// Removes the cgroups of the warm worker `name` if no process is in them.
    pub fn remove_warm(&self, name: &str) {
        self.remove_in(WARM_GROUP, name);
    }

    fn remove_in(&self, account_group: &str, name: &str) {
        for hierarchy in [&self.memory, &self.pids].into_iter().flatten() {
            let dir = if hierarchy.v2 {
                hierarchy.parent.join(account_group).join(name)
            } else {
                hierarchy.parent.join(name)
            };
            let _ = std::fs::remove_dir(dir);
        }
        if let Some(cpuacct) = self.cpuacct.as_ref().filter(|found| !found.v2) {
            let _ = std::fs::remove_dir(cpuacct.parent.join(account_group).join(name));
        }
    }

    /// Whether a claimed warm worker's groups can be renamed to its
    /// runner's rather than its processes moved ([`RunnerCgroup::take_warm`]):
    /// under v1, where a runner's memory and process groups lie in the
    /// server's group beside the warm workers' own.
    pub fn renames_warm(&self) -> bool {
        (self.memory.is_some() || self.pids.is_some()) && self.hierarchies().all(|found| !found.v2)
    }

    /// Whether runners get any cgroup.
    pub fn any(&self) -> bool {
        self.hierarchies().next().is_some()
    }

    /// Whether memory is held by a cgroup.
    pub fn has_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// Whether processes are counted by a cgroup.
    pub fn has_pids(&self) -> bool {
        self.pids.is_some()
    }

    /// Why a memory or process controller is missing, if one is.
    pub fn missing(&self) -> &[String] {
        &self.missing
    }

    /// Why accounts do not get equal CPU shares, when they do not.
    pub fn cpu_missing(&self) -> Option<&str> {
        self.cpu_missing.as_deref()
    }

    /// Whether a cgroup counts each account's CPU time.
    pub fn counts_cpu(&self) -> bool {
        self.cpuacct.is_some()
    }

    /// The CPU time `account`'s runners used under this server; `None`
    /// where no cgroup counts it.
    pub fn cpu_used(&self, account: &str) -> Option<Duration> {
        let hierarchy = self.cpuacct.as_ref()?;
        let dir = hierarchy.parent.join(account_group(account));
        if hierarchy.v2 {
            let micros = counter(Some(&dir.join("cpu.stat")), "usage_usec");
            return Some(Duration::from_micros(micros));
        }
        Some(Duration::from_nanos(number(&dir.join("cpuacct.usage"))))
    }

    fn detect_v2(own: &str) -> Self {
        let mut support = Self::default();
        let Some(path) = own.lines().find_map(|line| line.strip_prefix("0::")) else {
            let reason = "cgroup v2: this process's cgroup is unknown".to_owned();
            support.cpu_missing = Some(reason.clone());
            support.missing.push(reason);
            return support;
        };
        let base = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
        let enable = |dir: &Path, controllers: &str| {
            std::fs::write(dir.join("cgroup.subtree_control"), controllers).map_err(|err| {
                format!(
                    "cgroup v2: enabling {controllers} under {}: {err}",
                    dir.display()
                )
            })
        };
        let servers = base.join(RUNNERS_GROUP);
        let group = servers.join(std::process::id().to_string());
        let made = enable(&base, "+memory +pids")
            .and_then(|()| {
                std::fs::create_dir_all(&group)
                    .map_err(|err| format!("cgroup v2: creating {}: {err}", group.display()))
            })
            .and_then(|()| enable(&servers, "+memory +pids"))
            .and_then(|()| enable(&group, "+memory +pids"));
        let delegate =
            "(run the server in a cgroup delegated to it, e.g. a systemd unit with Delegate=yes)";
        if let Err(reason) = made {
            support.cpu_missing = Some(format!("{reason} {delegate}"));
            support.missing.push(format!("{reason} {delegate}"));
            return support;
        }
        let hierarchy = Hierarchy {
            parent: group.clone(),
            v2: true,
        };
        support.memory = Some(hierarchy.clone());
        support.pids = Some(hierarchy.clone());
        support.cpuacct = Some(hierarchy.clone());
        let cpu = [&base, &servers, &group]
            .into_iter()
            .try_for_each(|dir| enable(dir, "+cpu"));
        match cpu {
            Ok(()) => support.cpu = Some(hierarchy),
            Err(reason) => support.cpu_missing = Some(format!("{reason} {delegate}")),
        }
        support
    }
}

/// The v1 hierarchy of `controller` under this process's own group in it
/// (`own` is `/proc/self/cgroup`), with the server's group made; else why not.
fn v1_hierarchy(own: &str, controller: &str) -> Result<Hierarchy, String> {
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
        return Err(format!("cgroup v1: no {controller} hierarchy mounted"));
    };
    let parent = mount
        .join(path.trim_start_matches('/'))
        .join(RUNNERS_GROUP)
        .join(std::process::id().to_string());
    std::fs::create_dir_all(&parent)
        .map_err(|err| format!("cgroup v1: creating {}: {err}", parent.display()))?;
    Ok(Hierarchy { parent, v2: false })
}

/// The group of warm workers, which belong to no account yet (no account
/// group's name lacks the `ta-` prefix).
const WARM_GROUP: &str = "warm";

/// The name of `account`'s group: `ta-` and 16 hex characters of SHA-256
/// over the id (a safe file name whatever the id holds).
fn account_group(account: &str) -> String {
    let digest = hex::encode(Sha256::digest(account.as_bytes()));
    format!("ta-{}", &digest[..16])
}

/// One runner's cgroup(s), with its limits written.
#[derive(Debug)]
pub struct RunnerCgroup {
    /// The `cgroup.procs` files a worker joins before it starts.
    joins: Vec<PathBuf>,
    /// Those of them that share CPU by account (under v1).
    cpu_joins: Vec<PathBuf>,
    /// The runner's memory group, and whether it is v2.
    memory: Option<(PathBuf, bool)>,
    /// The `cgroup.procs` of the runner's own group (not its account's).
    own_procs: Option<PathBuf>,
    /// The file counting OOM kills (`oom_kill N`).
    oom_counter: Option<PathBuf>,
    /// The file counting refused forks (`max N`).
    fork_counter: Option<PathBuf>,
    /// The file counting the runner's own CPU time.
    cpu_counter: Option<CpuCounter>,
}

/// Where a runner's own cgroup counts its CPU time.
#[derive(Debug)]
enum CpuCounter {
    /// v1 `cpuacct.usage`: nanoseconds.
    V1(PathBuf),
    /// v2 `cpu.stat` (present whether or not the `cpu` controller is on):
    /// `usage_usec`.
    V2(PathBuf),
}

impl RunnerCgroup {
    /// Makes (or reuses) the cgroups of runner `name` of `account` and
    /// writes `limits`; done before every worker start, since an idle
    /// runner's cgroup is removed.
    pub fn create(
        support: &CgroupSupport,
        account: &str,
        name: &str,
        limits: &RunnerLimits,
    ) -> std::io::Result<Self> {
        Self::create_in(support, &account_group(account), name, limits)
    }

    /// Makes the cgroups of the warm worker `name`, of no account yet, and
    /// writes `limits`.
    pub fn create_warm(
        support: &CgroupSupport,
        name: &str,
        limits: &RunnerLimits,
    ) -> std::io::Result<Self> {
        Self::create_in(support, WARM_GROUP, name, limits)
    }

    fn create_in(
        support: &CgroupSupport,
        account_group: &str,
        name: &str,
        limits: &RunnerLimits,
    ) -> std::io::Result<Self> {
        let weight = support.cpu.is_some();
        let mut group = Self {
            memory: None,
            joins: Vec::new(),
            cpu_joins: Vec::new(),
            own_procs: None,
            oom_counter: None,
            fork_counter: None,
            cpu_counter: None,
        };
        if let Some(memory) = &support.memory {
            let dir = memory.runner_dir(account_group, name, weight)?;
            group.memory = Some((dir.clone(), memory.v2));
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
            group.join_own(dir.join("cgroup.procs"));
        }
        if let Some(pids) = &support.pids {
            let dir = pids.runner_dir(account_group, name, weight)?;
            std::fs::write(dir.join("pids.max"), limits.processes.to_string())?;
            group.fork_counter = Some(dir.join("pids.events"));
            group.join_own(dir.join("cgroup.procs"));
        }
        if let Some(cpu) = support.cpu.as_ref().filter(|found| !found.v2) {
            let dir = cpu.account_dir(account_group, true)?;
            group.join_cpu(dir.join("cgroup.procs"));
        }
        if let Some(cpuacct) = &support.cpuacct {
            if cpuacct.v2 {
                let dir = cpuacct.runner_dir(account_group, name, weight)?;
                group.cpu_counter = Some(CpuCounter::V2(dir.join("cpu.stat")));
            } else {
                let dir = cpuacct.account_dir(account_group, false)?.join(name);
                std::fs::create_dir_all(&dir)?;
                group.cpu_counter = Some(CpuCounter::V1(dir.join("cpuacct.usage")));
                group.join_cpu(dir.join("cgroup.procs"));
            }
        }
        Ok(group)
    }

    /// The groups of runner `name` of `account`, made from those of the
    /// claimed warm worker `warm_name` (where [`CgroupSupport::renames_warm`]):
    /// its memory and process groups are renamed to the runner's, which
    /// moves no process (a move waits for an RCU grace period, many
    /// milliseconds) and keeps their charges; its limits are the same.
    /// Its processes join the account's CPU groups later
    /// ([`RunnerCgroup::join_cpu_groups`]).
    pub fn take_warm(
        support: &CgroupSupport,
        account: &str,
        name: &str,
        warm_name: &str,
        limits: &RunnerLimits,
    ) -> std::io::Result<Self> {
        let mut renamed: Vec<&Path> = Vec::new();
        for hierarchy in [&support.memory, &support.pids].into_iter().flatten() {
            // Controllers mounted together share one group.
            if renamed.contains(&hierarchy.parent.as_path()) {
                continue;
            }
            std::fs::rename(
                hierarchy.parent.join(warm_name),
                hierarchy.parent.join(name),
            )?;
            renamed.push(&hierarchy.parent);
        }
        Self::create(support, account, name, limits)
    }

    /// Moves the processes of the runner's own group into its account's
    /// CPU groups, round after round until none is left out (a process
    /// forked meanwhile by one not yet moved is moved in the next round).
    pub fn join_cpu_groups(&self) -> std::io::Result<()> {
        let mut moved = std::collections::HashSet::new();
        for _ in 0..MOVE_ROUNDS {
            let listed = self.pids().unwrap_or_default();
            if listed.iter().all(|pid| moved.contains(pid)) {
                return Ok(());
            }
            for pid in listed {
                if moved.insert(pid) {
                    move_process(pid, &self.cpu_joins)?;
                }
            }
        }
        Err(std::io::Error::other(format!(
            "its processes were still forking after {MOVE_ROUNDS} rounds of moves"
        )))
    }

    /// Moves every process of `warm` (a claimed warm worker's groups) into
    /// these groups, with the memory they hold: where the kernel moves the
    /// charges along (v1, when it still can) they move; otherwise (v2) they
    /// stay behind, so this group's memory limit is lowered by them and the
    /// worker's total stays within its limit.
    pub fn adopt(&self, warm: &RunnerCgroup) -> std::io::Result<()> {
        let Some(pids) = warm.pids() else {
            return Ok(());
        };
        if let Some((dir, v2)) = &self.memory {
            let (used, limit) = match v2 {
                true => ("memory.current", "memory.max"),
                false => ("memory.usage_in_bytes", "memory.limit_in_bytes"),
            };
            // v1 can move charges along (on kernels that still do).
            let moved =
                !v2 && std::fs::write(dir.join("memory.move_charge_at_immigrate"), "3").is_ok();
            let held = warm
                .memory
                .as_ref()
                .map_or(0, |(warm_dir, _)| number(&warm_dir.join(used)));
            let max = number(&dir.join(limit));
            if !moved && max > 0 {
                std::fs::write(dir.join(limit), max.saturating_sub(held).to_string())?;
            }
        }
        for pid in pids {
            move_process(pid, &self.joins)?;
        }
        match warm.pids() {
            Some(left) if !left.is_empty() => Err(std::io::Error::other(format!(
                "{} processes of the warm worker stayed in its cgroup",
                left.len()
            ))),
            _ => Ok(()),
        }
    }

    fn join(&mut self, procs: PathBuf) {
        if !self.joins.contains(&procs) {
            self.joins.push(procs);
        }
    }

    fn join_own(&mut self, procs: PathBuf) {
        self.own_procs.get_or_insert_with(|| procs.clone());
        self.join(procs);
    }

    fn join_cpu(&mut self, procs: PathBuf) {
        if !self.cpu_joins.contains(&procs) {
            self.cpu_joins.push(procs.clone());
        }
        self.join(procs);
    }

    /// The `cgroup.procs` files a new worker writes itself into.
    pub fn procs_files(&self) -> &[PathBuf] {
        &self.joins
    }

    /// The processes in the runner's own cgroup; `None` when it has none
    /// of its own (only its account's).
    pub fn pids(&self) -> Option<Vec<u32>> {
        let procs = self.own_procs.as_ref()?;
        let listed = std::fs::read_to_string(procs).unwrap_or_default();
        Some(
            listed
                .lines()
                .filter_map(|line| line.trim().parse().ok())
                .collect(),
        )
    }

    /// Processes of the runner the kernel killed for memory, so far.
    pub fn oom_kills(&self) -> u64 {
        counter(self.oom_counter.as_deref(), "oom_kill")
    }

    /// Forks and thread starts the kernel refused at the process limit, so far.
    pub fn refused_forks(&self) -> u64 {
        counter(self.fork_counter.as_deref(), "max")
    }

    /// The CPU time the runner's processes used in its cgroup, so far;
    /// `None` where no cgroup of its own counts it.
    pub fn cpu_time(&self) -> Option<Duration> {
        match self.cpu_counter.as_ref()? {
            CpuCounter::V1(file) => Some(Duration::from_nanos(number(file))),
            CpuCounter::V2(file) => Some(Duration::from_micros(counter(Some(file), "usage_usec"))),
        }
    }
}

/// How many rounds [`RunnerCgroup::join_cpu_groups`] moves processes
/// before it gives up on a worker that keeps forking.
const MOVE_ROUNDS: usize = 16;

/// Moves process `pid` into each group of `procs` (its `cgroup.procs`
/// files); one that exited meanwhile is not moved.
fn move_process(pid: u32, procs: &[PathBuf]) -> std::io::Result<()> {
    for file in procs {
        match std::fs::write(file, pid.to_string()) {
            Err(err) if err.raw_os_error() == Some(libc::ESRCH) => {}
            Err(err) => {
                return Err(std::io::Error::other(format!(
                    "moving {pid} into {}: {err}",
                    file.display()
                )))
            }
            Ok(()) => {}
        }
    }
    Ok(())
}

/// Adds the processes in the groups under `dir` to `found`.
fn processes_in(dir: &Path, found: &mut BTreeSet<i32>) {
    for group in groups_under(dir) {
        let procs = std::fs::read_to_string(group.join("cgroup.procs")).unwrap_or_default();
        found.extend(
            procs
                .lines()
                .filter_map(|line| line.trim().parse::<i32>().ok()),
        );
    }
}

/// Removes a cgroup and the groups below it (each must hold no process).
fn remove_tree(dir: &Path) {
    for group in groups_under(dir) {
        let _ = std::fs::remove_dir(group);
    }
}

/// `dir` and every group below it, each after the groups below it.
fn groups_under(dir: &Path) -> Vec<PathBuf> {
    let mut groups = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                groups.extend(groups_under(&entry.path()));
            }
        }
    }
    groups.push(dir.to_path_buf());
    groups
}

/// Writes `value` to a control file the kernel may not have (swap
/// accounting is optional).
fn write_if_present(file: &Path, value: &str) -> std::io::Result<()> {
    match std::fs::write(file, value) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The number a one-number file holds, 0 if unreadable.
fn number(file: &Path) -> u64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
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

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn account_groups_are_stable_distinct_and_file_safe() {
        let a = account_group("acct/../x");
        assert_eq!(a, account_group("acct/../x"));
        assert_ne!(a, account_group("acct_y"));
        assert_eq!(a.len(), 19);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'));
    }

    #[test]
    fn a_sweep_kills_what_a_gone_server_left_in_its_groups_and_removes_them() {
        let support = CgroupSupport::detect();
        let Some(hierarchy) = support.pids.clone().or_else(|| support.memory.clone()) else {
            eprintln!("no cgroup controller for runners here; nothing to sweep");
            return;
        };
        let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .expect("pid_max")
            .trim()
            .parse()
            .expect("a number");
        // A server pid no process can have: that server is gone.
        let gone = hierarchy
            .servers()
            .expect("the servers' group")
            .join((pid_max + 1).to_string());
        let runner = gone.join("runner-left");
        std::fs::create_dir_all(&runner).expect("a runner's group");
        let mut left = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep runs");
        std::fs::write(runner.join("cgroup.procs"), left.id().to_string()).expect("moved in");

        support.sweep();

        let status = left.wait().expect("reaped");
        assert_eq!(status.signal(), Some(Signal::KILL.as_raw()), "{status:?}");
        assert!(!gone.exists(), "{} stays", gone.display());
    }
}
