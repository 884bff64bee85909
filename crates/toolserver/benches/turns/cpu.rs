//! CPU time per turn, read from /proc, and the medians of the arms.

/// The median of `values`.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// CPU time (user and system, in seconds) used so far by one server, by
/// Postgres (all its processes), and by every process of the machine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuUse {
    pub(crate) server: f64,
    pub(crate) postgres: f64,
    pub(crate) all: f64,
}

impl CpuUse {
    /// Reads `/proc` (the clock ticks are the kernel's USER_HZ, 100).
    pub(crate) fn now(server_pid: u32) -> Self {
        let mut used = Self {
            server: 0.0,
            postgres: 0.0,
            all: 0.0,
        };
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
            let fields: Vec<&str> = tail.split_whitespace().collect();
            let ticks: f64 =
                fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
            let seconds = ticks / 100.0;
            used.all += seconds;
            if pid == server_pid {
                used.server += seconds;
            } else if head.contains("(postgres") {
                used.postgres += seconds;
            }
        }
        used
    }

    /// Milliseconds per turn of each part used since `before`.
    pub(crate) fn per_turn(self, before: Self, turns: usize) -> [f64; 3] {
        let per = |now: f64, then: f64| (now - then) * 1000.0 / turns as f64;
        [
            per(self.server, before.server),
            per(self.postgres, before.postgres),
            per(self.all, before.all),
        ]
    }
}

/// What a run of arms measured: each arm's median turns/s, time to first
/// byte (ms), and CPU milliseconds per turn (its server, Postgres, all),
/// and its turns/s in each round.
pub(crate) struct ArmMedians {
    pub(crate) rate: Vec<f64>,
    pub(crate) ttfb: Vec<f64>,
    pub(crate) cpu: Vec<[f64; 3]>,
    pub(crate) round_rates: Vec<Vec<f64>>,
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
