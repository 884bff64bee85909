//! Arms compared round by round and turn by turn.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use toolserver_testsupport::bench::{ms, summary};

use crate::cpu::{median, ArmMedians, CpuUse};
use crate::measure::{concurrent, turn};
use crate::plan::{INTERLEAVED_TURNS, ROUNDS};
use crate::server::Server;
use crate::statements::{settle, Statements};

/// One turn of an arm: time to the first body byte and to the end.
pub(crate) type TurnFn = Arc<dyn Fn() -> BoxFuture<'static, (Duration, Duration)> + Send + Sync>;

/// An arm of a comparison: its name, the process whose CPU is its own (with
/// the processes it starts), and its turn.
pub(crate) struct Arm {
    pub(crate) label: String,
    pub(crate) pid: u32,
    pub(crate) turn: TurnFn,
}

impl Arm {
    /// Turns of `agent` on `server`.
    pub(crate) fn server(label: &str, server: &Arc<Server>, agent: &str) -> Self {
        let (server, agent) = (server.clone(), agent.to_owned());
        Self {
            label: label.to_owned(),
            pid: server.child.id().unwrap(),
            turn: Arc::new(move || {
                let (server, agent) = (server.clone(), agent.clone());
                Box::pin(async move { turn(&server, &agent).await })
            }),
        }
    }
}

/// `ROUNDS` rounds of turns on each arm in turn (so all see the same
/// machine state), each run counting its statements; the medians of each
/// arm.
pub(crate) async fn rounds(
    arms: &[Arm],
    clients: usize,
    per_client: usize,
    statements: &mut Statements,
) -> ArmMedians {
    let turns = clients * per_client;
    let mut rates = vec![Vec::new(); arms.len()];
    let mut ttfbs = vec![Vec::new(); arms.len()];
    let mut cpus = vec![Vec::new(); arms.len()];
    let mut counts = vec![Vec::new(); arms.len()];
    for _ in 0..ROUNDS {
        for (n, arm) in arms.iter().enumerate() {
            let run = arm.turn.clone();
            settle().await;
            statements.reset().await;
            let before = CpuUse::now(arm.pid, &statements.name);
            let (rate, ttfb) = concurrent(&arm.label, clients, per_client, move || run()).await;
            settle().await;
            cpus[n].push(CpuUse::now(arm.pid, &statements.name).per_turn(before, turns));
            counts[n].push(statements.read().await);
            rates[n].push(rate);
            ttfbs[n].push(ms(ttfb));
        }
    }
    ArmMedians {
        round_rates: rates.clone(),
        rate: rates.into_iter().map(median).collect(),
        ttfb: ttfbs.into_iter().map(median).collect(),
        cpu: cpus.iter().map(|samples| CpuUse::median(samples)).collect(),
        statements: counts
            .iter()
            .map(|runs| median(runs.iter().map(|c| c.per_turn(turns)).collect()))
            .collect(),
        last_statements: counts
            .into_iter()
            .map(|mut runs| runs.pop().unwrap())
            .collect(),
    }
}

/// `INTERLEAVED_TURNS` sequential turns of `agent` on each of `arms`,
/// alternating turn by turn (which goes first in a pair alternates too,
/// so each arm follows the other as often as itself); each turn's arm and
/// whole-turn time, in the order they ran.
pub(crate) async fn interleaved(arms: [&Server; 2], agent: &str) -> Vec<(usize, Duration)> {
    let mut turns = Vec::new();
    for pair in 0..INTERLEAVED_TURNS {
        let order = if pair % 2 == 0 { [0, 1] } else { [1, 0] };
        for arm in order {
            turns.push((arm, turn(arms[arm], agent).await.1));
        }
    }
    turns
}

/// `INTERLEAVED_TURNS` sequential turns of `agent` on each of `arms`,
/// alternating in blocks of `block` turns (which arm goes first
/// alternates): for arms that leave work behind to be done a moment later
/// (a writer that holds its rows), which turn by turn would land in the
/// other arm's next turn, and in blocks stays in the arm's own block but
/// for its last moment. Each turn's arm and whole-turn time, in order.
pub(crate) async fn in_blocks(
    arms: [&Server; 2],
    agent: &str,
    block: usize,
) -> Vec<(usize, Duration)> {
    let mut turns = Vec::new();
    for pair in 0..INTERLEAVED_TURNS.div_ceil(block) {
        let order = if pair % 2 == 0 { [0, 1] } else { [1, 0] };
        for arm in order {
            for _ in 0..block {
                turns.push((arm, turn(arms[arm], agent).await.1));
            }
        }
    }
    turns
}

/// The whole-turn times of `arm`'s turns in `turns`; with `after`, only of
/// those that ran right after a turn of that arm.
pub(crate) fn times_of(
    turns: &[(usize, Duration)],
    arm: usize,
    after: Option<usize>,
) -> Vec<Duration> {
    turns
        .iter()
        .enumerate()
        .filter(|(n, (of, _))| {
            *of == arm && after.is_none_or(|before| *n > 0 && turns[n - 1].0 == before)
        })
        .map(|(_, (_, took))| *took)
        .collect()
}

/// The mean of `samples`, in milliseconds.
pub(crate) fn mean_ms(samples: &[Duration]) -> f64 {
    samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len() as f64
}

/// Prints a comparison (see [`interleaved`], [`in_blocks`] with `block`
/// turns in a row; 1 for turn by turn) of arms named
/// `names` (in full, then in short): each arm's whole-turn times, the ratio
/// of arm 0's turns/s over arm 1's, and each arm's turns split by the arm
/// of the turn before. Returns the ratio.
pub(crate) fn report_interleaved(
    turns: &[(usize, Duration)],
    block: usize,
    names: [&str; 2],
    short: [&str; 2],
) -> f64 {
    let (first, second) = (times_of(turns, 0, None), times_of(turns, 1, None));
    let pair_ratios = turns
        .chunks(2 * block)
        .map(|pair| mean_ms(&times_of(pair, 1, None)) / mean_ms(&times_of(pair, 0, None)))
        .collect();
    let (first_p50, _) = summary(&format!("{}: whole turn", names[0]), first.clone());
    let (second_p50, _) = summary(&format!("{}: whole turn", names[1]), second.clone());
    let ratio = mean_ms(&second) / mean_ms(&first);
    println!(
        "{} vs {}, turn by turn: {ratio:.3}x the turns/s (mean turn {:.3} vs {:.3} ms; median of pairs' ratios {:.3}x), whole turn p50 {:+.3} ms",
        names[0],
        names[1],
        mean_ms(&first),
        mean_ms(&second),
        median(pair_ratios),
        ms(first_p50) - ms(second_p50)
    );
    for (arm, label) in short.iter().enumerate() {
        let p50_after = |before| {
            median(
                times_of(turns, arm, Some(before))
                    .into_iter()
                    .map(ms)
                    .collect(),
            )
        };
        println!(
            "{label} turns: p50 {:.3} ms after {}, {:.3} ms after {}",
            p50_after(0),
            short[0],
            p50_after(1),
            short[1]
        );
    }
    ratio
}
