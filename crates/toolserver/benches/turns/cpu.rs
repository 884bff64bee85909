//! CPU time per turn, read from /proc, and the medians of the arms.

use std::collections::{HashMap, HashSet};

/// The median of `values`.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// CPU time used by one server, by its runners (the processes it started:
/// the Node workers and their bubblewrap parents), by Postgres (its
/// connections to the scratch database, and the cluster's own processes:
/// see [`PostgresPart`]) and by every process of the machine: seconds used
/// so far (from [`Self::now`]) or milliseconds per turn (from
/// [`Self::per_turn`]).
///
/// Summed over the live threads of each process from their `schedstat`
/// (nanoseconds, so windows of a few turns measure too); threads and
/// processes that exited before the reading are not counted.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuUse {
    pub(crate) server: f64,
    pub(crate) runners: f64,
    pub(crate) connections: f64,
    pub(crate) cluster: f64,
    pub(crate) all: f64,
}

/// What a Postgres process does for the scratch database.
enum PostgresPart {
    /// A connection to it or a worker in it (their titles name it).
    Connection,
    /// One of the cluster's own processes (the postmaster, WAL writer,
    /// checkpointer, …), which work for every database: on a machine where
    /// tests run on the same cluster, for theirs too.
    Cluster,
}

impl PostgresPart {
    /// The part of the Postgres process titled `title`; none for a
    /// connection to another database.
    fn of(title: &str, database: &str) -> Option<Self> {
        if title.split_whitespace().any(|word| word == database) {
            return Some(Self::Connection);
        }
        let elsewhere =
            title.contains('(') || title.contains("[local]") || title.contains("worker");
        (!elsewhere).then_some(Self::Cluster)
    }
}

/// One process of the machine, as `/proc` shows it.
struct Process {
    pid: u32,
    parent: u32,
    /// A Postgres process's title (its command line).
    postgres: Option<String>,
    seconds: f64,
}

impl Process {
    /// Reads process `pid`, unless it exited meanwhile.
    fn read(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (head, tail) = stat.rsplit_once(')')?;
        let parent = tail.split_whitespace().nth(1)?.parse().ok()?;
        let mut nanos = 0u64;
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
        {
            let Ok(schedstat) = std::fs::read_to_string(task.path().join("schedstat")) else {
                continue;
            };
            nanos += schedstat
                .split_whitespace()
                .next()
                .and_then(|ran| ran.parse::<u64>().ok())
                .unwrap_or(0);
        }
        Some(Self {
            pid,
            parent,
            postgres: head.contains("(postgres").then(|| {
                let title = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                String::from_utf8_lossy(&title).replace('\0', " ")
            }),
            seconds: nanos as f64 / 1e9,
        })
    }
}

impl CpuUse {
    /// Seconds used so far, with the server of process `server_pid` and
    /// the scratch database `database`.
    pub(crate) fn now(server_pid: u32, database: &str) -> Self {
        let processes: Vec<Process> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().to_string_lossy().parse().ok())
            .filter_map(Process::read)
            .collect();
        let runners = descendants(&processes, server_pid);
        let mut used = Self::default();
        for process in &processes {
            used.all += process.seconds;
            if process.pid == server_pid {
                used.server += process.seconds;
            } else if runners.contains(&process.pid) {
                used.runners += process.seconds;
            } else if let Some(title) = &process.postgres {
                match PostgresPart::of(title, database) {
                    Some(PostgresPart::Connection) => used.connections += process.seconds,
                    Some(PostgresPart::Cluster) => used.cluster += process.seconds,
                    None => {}
                }
            }
        }
        used
    }

    /// Postgres's part in all.
    pub(crate) fn postgres(&self) -> f64 {
        self.connections + self.cluster
    }

    /// Postgres's milliseconds per turn, as printed: in all, then split.
    pub(crate) fn postgres_text(&self) -> String {
        format!(
            "Postgres {:.3} ms (connections {:.3}, cluster processes {:.3})",
            self.postgres(),
            self.connections,
            self.cluster
        )
    }

    /// Milliseconds per turn of each part used since `before`.
    pub(crate) fn per_turn(self, before: Self, turns: usize) -> Self {
        self.minus(before).times(1000.0 / turns as f64)
    }

    /// Each part of this less the same part of `other`.
    pub(crate) fn minus(self, other: Self) -> Self {
        self.zip(other, |this, that| this - that)
    }

    /// Each part times `factor`.
    pub(crate) fn times(self, factor: f64) -> Self {
        self.zip(self, |this, _| this * factor)
    }

    /// Each part of this and `other` put together by `join`.
    fn zip(self, other: Self, join: impl Fn(f64, f64) -> f64) -> Self {
        Self {
            server: join(self.server, other.server),
            runners: join(self.runners, other.runners),
            connections: join(self.connections, other.connections),
            cluster: join(self.cluster, other.cluster),
            all: join(self.all, other.all),
        }
    }

    /// The median of each part over `samples`.
    pub(crate) fn median(samples: &[Self]) -> Self {
        let part = |of: fn(&Self) -> f64| median(samples.iter().map(of).collect());
        Self {
            server: part(|s| s.server),
            runners: part(|s| s.runners),
            connections: part(|s| s.connections),
            cluster: part(|s| s.cluster),
            all: part(|s| s.all),
        }
    }
}

/// The processes descended from `root` (not `root` itself).
fn descendants(processes: &[Process], root: u32) -> HashSet<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for process in processes {
        children
            .entry(process.parent)
            .or_default()
            .push(process.pid);
    }
    let mut found = HashSet::new();
    let mut pending = vec![root];
    while let Some(pid) = pending.pop() {
        for &child in children.get(&pid).map_or(&[][..], Vec::as_slice) {
            if found.insert(child) {
                pending.push(child);
            }
        }
    }
    found
}

/// What a run of arms measured: each arm's median turns/s, time to first
/// byte (ms), CPU milliseconds per turn and statements per turn, its
/// turns/s in each round, and the statements of its last round.
pub(crate) struct ArmMedians {
    pub(crate) rate: Vec<f64>,
    pub(crate) ttfb: Vec<f64>,
    pub(crate) cpu: Vec<CpuUse>,
    pub(crate) statements: Vec<f64>,
    pub(crate) round_rates: Vec<Vec<f64>>,
    pub(crate) last_statements: Vec<crate::statements::Counts>,
}

impl ArmMedians {
    /// The median over rounds of arm `arm`'s turns/s over arm `base`'s in
    /// the same round: steadier than the ratio of the medians when the
    /// machine's speed drifts between rounds.
    pub(crate) fn paired_ratio(&self, arm: usize, base: usize) -> f64 {
        let ratios = self.round_rates[arm]
            .iter()
            .zip(&self.round_rates[base])
            .map(|(rate, base_rate)| rate / base_rate)
            .collect();
        median(ratios)
    }
}
