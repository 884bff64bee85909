//! `toolserver-chaos`: crash trials of detached turns against a `toolserver`
//! binary. Prints `trials=N lost=L duplicated=D stuck=S leaked=K
//! misordered=M` (and a line of figures) and exits 1 when any of those
//! counts is not zero.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use toolserver_chaos::{run, ChaosConfig};

/// Crash trials: two servers on one scratch database, a scripted model,
/// detached turns with async calls, a random server SIGKILLed and restarted
/// per trial; checks nothing is lost, duplicated, stuck, leaked or
/// misordered.
#[derive(Debug, Parser)]
#[command(name = "toolserver-chaos")]
struct Args {
    /// The toolserver binary to run.
    #[arg(long)]
    binary: PathBuf,
    /// Number of trials.
    #[arg(long, default_value_t = 20)]
    trials: usize,
    /// Seed of the random choices (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Postgres URL of a user that may create databases.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    database_url: String,
    /// Seconds after the restart within which every turn must settle.
    #[arg(long, default_value_t = 30)]
    settle_timeout_secs: u64,
    /// The kill lands within this many milliseconds of the turns' start.
    #[arg(long, default_value_t = 2000)]
    kill_window_ms: u64,
    /// Most turns per trial.
    #[arg(long, default_value_t = 3)]
    max_turns: usize,
    /// Most async calls per turn.
    #[arg(long, default_value_t = 20)]
    max_siblings: usize,
    /// The share of trials (0 to 1) that run two turns back to back on one
    /// conversation with the kill between them (1: every trial).
    #[arg(long, default_value_t = 0.25, value_parser = share)]
    back_to_back_share: f64,
    /// An extra server setting, `NAME=VALUE` (repeatable).
    #[arg(long = "server-env", value_parser = name_value)]
    server_env: Vec<(String, String)>,
    /// Keep the run's directory (server logs, data dirs) even when clean.
    #[arg(long)]
    keep_dir: bool,
}

fn share(raw: &str) -> Result<f64, String> {
    raw.parse::<f64>()
        .ok()
        .filter(|share| (0.0..=1.0).contains(share))
        .ok_or_else(|| format!("expected a number from 0 to 1, got {raw:?}"))
}

fn name_value(raw: &str) -> Result<(String, String), String> {
    raw.split_once('=')
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .ok_or_else(|| format!("expected NAME=VALUE, got {raw:?}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |since| since.as_secs())
    });
    eprintln!(
        "chaos: {} trials with seed {seed} against {}",
        args.trials,
        args.binary.display()
    );
    let mut config = ChaosConfig::new(args.binary, args.database_url);
    config.trials = args.trials;
    config.seed = seed;
    config.settle_timeout = Duration::from_secs(args.settle_timeout_secs);
    config.kill_window = Duration::from_millis(args.kill_window_ms);
    config.max_turns = args.max_turns;
    config.max_siblings = args.max_siblings;
    config.back_to_back_share = args.back_to_back_share;
    config.server_env = args.server_env;
    config.keep_dir = args.keep_dir;
    let summary = run(config)
        .await
        .context("the chaos run could not be carried out")?;
    println!("{summary}");
    Ok(if summary.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
