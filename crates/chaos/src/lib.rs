//! Crash trials of detached turns against the real `toolserver` binary.
//!
//! A run creates a scratch database, starts a scripted model and two server
//! processes on that database (each with its own port and data directory),
//! uploads four async tools (quick, failing, slow, heartbeating) and an
//! agent that enables them, then runs trials: each starts 1-3 detached
//! turns of 1-20 async calls, SIGKILLs a random server at a random moment,
//! restarts it on the same port and data directory, and checks that every
//! turn reached exactly one terminal state within the settle timeout, that
//! each pass ran the model once (one distinct `Idempotency-Key`), that
//! `GET /async/{id}` agrees with the stored conversation, and that the
//! killed server's runner processes died with it. A share of the trials
//! runs two turns back to back on one conversation instead, the second sent
//! to the surviving server right after the kill ([`back_to_back`]): they
//! also measure how soon after the kill the second turn is accepted, and
//! check that the conversation reads in the order things happened
//! ([`order`]). At the end both servers are stopped with SIGTERM and no
//! runner may outlive them.
//!
//! Only the public HTTP API, the process table and the model's requests are
//! looked at, so any server version can be tried.

pub mod api;
pub mod back_to_back;
pub mod checks;
pub mod config;
pub mod ledger;
pub mod model;
pub mod order;
pub mod plan;
pub mod procs;
pub mod servers;
pub mod summary;
pub mod tools;
pub mod trial;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

pub use config::ChaosConfig;
pub use summary::Summary;

use crate::api::Api;
use crate::model::ChaosModel;
use crate::servers::Server;
use crate::trial::{BackToBackRecord, Cluster, Outcome, TrialReport, TurnRecord};
use toolserver_testsupport::bench::ScratchDatabase;
use toolserver_testsupport::http::free_port;

/// Why a run could not be carried out (as opposed to what it found).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// Something the run needs could not be set up.
    #[error("{0}")]
    Setup(String),
    /// A local file or process operation failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The scratch database could not be created or dropped.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// The settings every server gets (before [`ChaosConfig::server_env`]):
/// one database, one bundle directory and the same keys, so either server
/// can run any turn.
fn server_env(database_url: &str, root: &Path) -> Vec<(String, String)> {
    let bundles = root.join("bundles");
    [
        ("DATABASE_URL", database_url),
        ("TOOLSERVER_BUNDLE_DIR", &bundles.to_string_lossy()),
        ("TOOLSERVER_BUNDLE_URL_SECRET", &"b7".repeat(32)),
        ("TOOLSERVER_JWT_SECRET", api::JWT_SECRET),
        ("TOOLSERVER_SECRETS_KEY", &"5c".repeat(32)),
        ("TOOLSERVER_OUTBOUND_ALLOW_PRIVATE", "true"),
        ("TOOLSERVER_CONTINUATION_POLL_MS", "100"),
        ("TOOLSERVER_TURN_LEASE_SECS", "3"),
        ("TOOLSERVER_SHUTDOWN_GRACE_SECS", "5"),
        ("TOOLSERVER_LOG_FORMAT", "text"),
        ("RUST_LOG", "warn"),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .collect()
}

/// How long a server may take to exit after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// How long the run waits after the last trial before reading every turn
/// again (a late duplicate would show by then).
const FINAL_PAUSE: Duration = Duration::from_secs(2);

/// Runs `config.trials` crash trials and returns what they found. The
/// run's directory (server logs) is kept, and its path printed, when a
/// count is not zero.
pub async fn run(config: ChaosConfig) -> Result<Summary, ChaosError> {
    let started = Instant::now();
    let root = tempfile::Builder::new()
        .prefix("toolserver-chaos-")
        .tempdir()?;
    // Runners may run as another user: they must reach their roots.
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))?;
    let database =
        ScratchDatabase::try_create(&config.database_url, &format!("chaos_{}", config.seed))
            .await?;
    let outcome = run_in(&config, root.path(), &database.url).await;
    let dropped = database.try_drop().await;
    let mut summary = outcome?;
    dropped?;
    summary.wall = started.elapsed();
    if config.keep_dir || !summary.is_clean() {
        let kept = root.keep();
        eprintln!(
            "chaos: server logs, data and evidence/<turn>.json are in {}",
            kept.display()
        );
    }
    Ok(summary)
}

async fn run_in(
    config: &ChaosConfig,
    root: &Path,
    database_url: &str,
) -> Result<Summary, ChaosError> {
    let api = Api::new()?;
    let model = ChaosModel::start().await?;
    let mut env = server_env(database_url, root);
    env.extend(config.server_env.iter().cloned());
    let mut servers = [
        Server::new(&config.binary, "a", free_port(), root, &env)?,
        Server::new(&config.binary, "b", free_port(), root, &env)?,
    ];
    // One after the other: the first applies the migrations.
    for server in &mut servers {
        server.start(&api).await?;
    }
    let agent = tools::create_agent(&api, &servers[0].base, &model.base_url()).await?;
    let mut cluster = Cluster {
        servers,
        api,
        model,
        agent,
        tag: format!("{}-{}", std::process::id(), config.seed),
        evidence_dir: root.join("evidence"),
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(config.seed);
    let mut turns: Vec<TurnRecord> = Vec::new();
    let mut pairs: Vec<BackToBackRecord> = Vec::new();
    let mut settles = Vec::new();
    let mut leaked = 0;
    for index in 0..config.trials {
        let report = run_trial(&mut cluster, config, &mut rng, index).await?;
        print_trial(index, config.trials, &report);
        leaked += report.leaked.len();
        settles.extend(report.settle);
        turns.extend(report.turns);
        pairs.extend(report.back_to_back);
    }
    tokio::time::sleep(FINAL_PAUSE).await;
    for pair in &mut pairs {
        for reason in back_to_back::check_order(&cluster, pair).await {
            if !pair.misordered.contains(&reason) {
                eprintln!("chaos: {} at the end of the run: {reason}", pair.name());
                pair.misordered.push(reason);
            }
        }
    }
    for turn in &mut turns {
        let again = trial::examine(&cluster, turn).await;
        for reason in again
            .lost
            .iter()
            .chain(&again.duplicated)
            .chain(&again.unrecorded)
        {
            if !turn.verdict.lost.contains(reason)
                && !turn.verdict.duplicated.contains(reason)
                && !turn.verdict.unrecorded.contains(reason)
            {
                eprintln!(
                    "chaos: {} at the end of the run: {reason}",
                    turn.plan.marker
                );
            }
        }
        merge(&mut turn.verdict, again);
    }
    let mut unclean_stops = 0;
    for server in &mut cluster.servers {
        if !server.stop(STOP_GRACE).await? {
            unclean_stops += 1;
        }
    }
    let left: Vec<procs::Process> = cluster
        .servers
        .iter()
        .flat_map(|server| procs::mentioning(&server.runner_needle()))
        .collect();
    let left = procs::survivors(left, config.leak_grace).await;
    for process in &left {
        eprintln!(
            "chaos: leaked after shutdown: pid {} {}",
            process.pid, process.cmdline
        );
        procs::kill(process).await;
    }
    leaked += left.len();
    let unplanned = cluster.model.unplanned();
    if unplanned > 0 {
        eprintln!("chaos: the model got {unplanned} requests without a turn plan");
    }
    let mut summary = summarize(config.trials, &turns, settles, leaked, unclean_stops);
    add_back_to_back(&mut summary, &pairs);
    Ok(summary)
}

/// The back-to-back trials' counts and figures.
fn add_back_to_back(summary: &mut Summary, pairs: &[BackToBackRecord]) {
    let mut accepted: Vec<Duration> = pairs
        .iter()
        .filter_map(|pair| pair.accepted_after_kill)
        .collect();
    accepted.sort();
    summary.back_to_back = pairs.len();
    summary.misordered = pairs
        .iter()
        .filter(|pair| !pair.misordered.is_empty())
        .count();
    summary.accept_p50 = accepted
        .get(accepted.len() / 2)
        .copied()
        .unwrap_or_default();
    summary.accept_max = accepted.last().copied().unwrap_or_default();
}

/// Adds the reasons of `again` not yet in `verdict`; counters come from `again`.
fn merge(verdict: &mut checks::Verdict, again: checks::Verdict) {
    for reason in again.lost {
        if !verdict.lost.contains(&reason) {
            verdict.lost.push(reason);
        }
    }
    for reason in again.duplicated {
        if !verdict.duplicated.contains(&reason) {
            verdict.duplicated.push(reason);
        }
    }
    verdict.failed |= again.failed;
    verdict.retries = again.retries;
    verdict.unkeyed = again.unkeyed;
    verdict.unlaunched = again.unlaunched;
    verdict.unlaunched_error = again.unlaunched_error;
    for reason in again.unrecorded {
        if !verdict.unrecorded.contains(&reason) {
            verdict.unrecorded.push(reason);
        }
    }
    verdict.attempts = again.attempts;
}

fn summarize(
    trials: usize,
    turns: &[TurnRecord],
    mut settles: Vec<Duration>,
    leaked: usize,
    unclean_stops: usize,
) -> Summary {
    settles.sort();
    let lost = |turn: &&TurnRecord| {
        !turn.verdict.lost.is_empty() || matches!(turn.outcome, Outcome::NotStarted(_))
    };
    Summary {
        trials,
        lost: turns.iter().filter(lost).count(),
        duplicated: turns
            .iter()
            .filter(|turn| !turn.verdict.duplicated.is_empty())
            .count(),
        stuck: turns
            .iter()
            .filter(|turn| matches!(turn.outcome, Outcome::Stuck(_)))
            .count(),
        leaked,
        turns: turns.len(),
        calls: turns.iter().map(|turn| turn.plan.calls.len()).sum(),
        failed: turns.iter().filter(|turn| turn.verdict.failed).count(),
        retries: turns.iter().map(|turn| turn.verdict.retries).sum(),
        unkeyed: turns.iter().map(|turn| turn.verdict.unkeyed).sum(),
        unlaunched: turns.iter().map(|turn| turn.verdict.unlaunched).sum(),
        unrecorded: turns
            .iter()
            .filter(|turn| !turn.verdict.unrecorded.is_empty())
            .count(),
        attempts: turns.iter().map(|turn| turn.verdict.attempts).sum(),
        settle_p50: settles.get(settles.len() / 2).copied().unwrap_or_default(),
        settle_max: settles.last().copied().unwrap_or_default(),
        unclean_stops,
        ..Summary::default()
    }
}

/// One progress line per trial, and a line per problem, on stderr.
fn print_trial(index: usize, trials: usize, report: &TrialReport) {
    let calls: usize = report.turns.iter().map(|turn| turn.plan.calls.len()).sum();
    let settled = match report.settle {
        Some(time) => format!("settled {} ms after the restart", time.as_millis()),
        None => "NOT SETTLED".to_owned(),
    };
    eprintln!(
        "chaos: trial {}/{trials}: {} turns, {calls} calls, killed {} after {} ms, {settled}",
        index + 1,
        report.turns.len(),
        report.kill.0,
        report.kill.1.as_millis()
    );
    let servers = ["a", "b"];
    for turn in &report.turns {
        let name = &turn.plan.marker;
        let on = servers[turn.server];
        match &turn.outcome {
            Outcome::NotStarted(why) => {
                eprintln!("chaos:   {name} (on {on}) lost: not started: {why}")
            }
            Outcome::Stuck(status) => {
                eprintln!(
                    "chaos:   {name} (on {on}) stuck: still {status} ({})",
                    turn.status_id
                );
            }
            Outcome::Settled(_) => {}
        }
        for reason in &turn.verdict.lost {
            eprintln!("chaos:   {name} (on {on}) lost: {reason}");
        }
        for reason in &turn.verdict.duplicated {
            eprintln!("chaos:   {name} (on {on}) duplicated: {reason}");
        }
        for reason in &turn.verdict.unrecorded {
            eprintln!("chaos:   {name} (on {on}) unrecorded: {reason}");
        }
        if let Some(error) = &turn.verdict.unlaunched_error {
            eprintln!(
                "chaos:   {name} (on {on}) {} calls not launched, the first: {error}",
                turn.verdict.unlaunched
            );
        }
    }
    for process in &report.leaked {
        eprintln!(
            "chaos:   leaked: pid {} outlived server {}: {}",
            process.pid, report.kill.0, process.cmdline
        );
    }
    if let Some(pair) = &report.back_to_back {
        let accepted = match pair.accepted_after_kill {
            Some(after) => format!("accepted {} ms after the kill", after.as_millis()),
            None => "NOT ACCEPTED".to_owned(),
        };
        eprintln!(
            "chaos:   back to back on one conversation ({} on {}, {} on the survivor): {accepted}, \
             {} busy answers first",
            pair.first.marker, pair.first_on, pair.second.marker, pair.busy
        );
        for reason in &pair.misordered {
            eprintln!("chaos:   {} misordered: {reason}", pair.name());
        }
    }
}

/// Runs trial `index`: back to back turns on one conversation in
/// [`ChaosConfig::back_to_back_share`] of the trials, concurrent turns on
/// conversations of their own in the others.
async fn run_trial(
    cluster: &mut Cluster,
    config: &ChaosConfig,
    rng: &mut impl Rng,
    index: usize,
) -> Result<TrialReport, ChaosError> {
    if rng.gen_bool(config.back_to_back_share.clamp(0.0, 1.0)) {
        back_to_back::run(cluster, config, rng, index).await
    } else {
        trial::run_concurrent(cluster, config, rng, index).await
    }
}
