//! What /proc shows of the server's process tree, sampled during a flood.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::plan::{SAMPLE_EVERY, SETTLE_MAX};

/// What /proc shows of the server's process tree at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TreeSample {
    /// Direct children of the server that are `bwrap` or `node`: one per
    /// runner (under bubblewrap, node runs below its bwrap).
    pub(crate) runners: usize,
    /// Resident memory of every process below the server, in MiB.
    pub(crate) runner_rss_mib: f64,
    /// Resident memory of the server itself, in MiB.
    pub(crate) server_rss_mib: f64,
    /// CPU time (user and system) of the server and every process below
    /// it, in seconds.
    pub(crate) cpu_seconds: f64,
}

/// Resident memory of `pid` in MiB (0 when it is gone).
pub(crate) fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kib| kib.split_whitespace().next())
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Reads the tree of processes below `server` from /proc (the clock ticks
/// are the kernel's USER_HZ, 100).
pub(crate) fn sample_tree(server: u32) -> TreeSample {
    let mut children: HashMap<u32, Vec<(u32, String)>> = HashMap::new();
    let mut ticks: HashMap<u32, f64> = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head.split_once('(').map_or("", |(_, comm)| comm).to_owned();
        let fields: Vec<&str> = tail.split_whitespace().collect();
        let (Some(Ok(parent)), Some(Ok(user)), Some(Ok(system))) = (
            fields.get(1).map(|f| f.parse::<u32>()),
            fields.get(11).map(|f| f.parse::<f64>()),
            fields.get(12).map(|f| f.parse::<f64>()),
        ) else {
            continue;
        };
        children.entry(parent).or_default().push((pid, comm));
        ticks.insert(pid, user + system);
    }
    let runners = children.get(&server).map_or(0, |direct| {
        direct
            .iter()
            .filter(|(_, comm)| comm == "bwrap" || comm == "node")
            .count()
    });
    let mut sample = TreeSample {
        runners,
        server_rss_mib: rss_mib(server),
        cpu_seconds: ticks.get(&server).copied().unwrap_or(0.0) / 100.0,
        ..TreeSample::default()
    };
    let mut below: Vec<u32> = children
        .get(&server)
        .map(|direct| direct.iter().map(|(pid, _)| *pid).collect())
        .unwrap_or_default();
    while let Some(pid) = below.pop() {
        sample.runner_rss_mib += rss_mib(pid);
        sample.cpu_seconds += ticks.get(&pid).copied().unwrap_or(0.0) / 100.0;
        below.extend(children.get(&pid).into_iter().flatten().map(|(p, _)| *p));
    }
    sample
}

/// Reads the server's process tree every `SAMPLE_EVERY` on a thread of its
/// own until stopped.
pub(crate) struct Sampler {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) thread: std::thread::JoinHandle<Vec<TreeSample>>,
}

impl Sampler {
    pub(crate) fn start(server: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                samples.push(sample_tree(server));
                std::thread::sleep(SAMPLE_EVERY);
            }
            samples.push(sample_tree(server));
            samples
        });
        Self { stop, thread }
    }

    /// Stops sampling; every sample, the last taken now.
    pub(crate) fn finish(self) -> Vec<TreeSample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Waits (at most `SETTLE_MAX`) until the server and its runners use
/// less than a tenth of a core, so one phase's leftovers do not weigh on
/// the next; prints how long it took.
pub(crate) async fn settle(server: u32) {
    let started = Instant::now();
    let mut before = sample_tree(server).cpu_seconds;
    while started.elapsed() < SETTLE_MAX {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = sample_tree(server).cpu_seconds;
        if now - before < 0.1 {
            break;
        }
        before = now;
    }
    println!(
        "(the server went quiet {:.1} s after the flood)",
        started.elapsed().as_secs_f64()
    );
}
