//! What one chaos run does: which binary, how many trials, how hard.

use std::path::PathBuf;
use std::time::Duration;

/// The settings of one run of crash trials.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// The `toolserver` binary to run (both server processes).
    pub binary: PathBuf,
    /// How many trials (each: start turns, kill a server, restart it, check).
    pub trials: usize,
    /// Seed of every random choice, so a failing run can be repeated.
    pub seed: u64,
    /// A Postgres URL whose user may create and drop databases; the run
    /// uses a fresh database on that server and drops it at the end.
    pub database_url: String,
    /// How long after the killed server is back every turn of the trial
    /// has to reach a terminal state before it counts as stuck.
    pub settle_timeout: Duration,
    /// The kill lands at a uniformly random moment within this long after
    /// the trial's turns were started.
    pub kill_window: Duration,
    /// Most detached turns started per trial (at least one is).
    pub max_turns: usize,
    /// The share of trials (0 to 1, drawn at random per trial) that run two
    /// turns back to back on one conversation with the kill between them
    /// instead of concurrent turns on conversations of their own.
    pub back_to_back_share: f64,
    /// Most async tool calls (siblings) the model makes in one turn's first pass.
    pub max_siblings: usize,
    /// How long a killed server's runner processes may outlive it.
    pub leak_grace: Duration,
    /// Extra environment of both servers, after (so over) the harness's own.
    pub server_env: Vec<(String, String)>,
    /// Keep the run's directory (server logs, data dirs) even when every
    /// count is zero; it is always kept otherwise.
    pub keep_dir: bool,
}

impl ChaosConfig {
    /// The defaults of the CI-sized run: 20 trials, 30 s to settle, kills
    /// within 2 s, 1-3 turns of 1-20 siblings each, a quarter of the trials
    /// back to back.
    pub fn new(binary: PathBuf, database_url: String) -> Self {
        Self {
            binary,
            trials: 20,
            seed: 1,
            database_url,
            settle_timeout: Duration::from_secs(30),
            kill_window: Duration::from_secs(2),
            max_turns: 3,
            back_to_back_share: 0.25,
            max_siblings: 20,
            leak_grace: Duration::from_secs(3),
            server_env: Vec::new(),
            keep_dir: false,
        }
    }
}
