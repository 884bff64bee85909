//! Arms compared round by round and turn by turn.

use std::time::Duration;

use toolserver_testsupport::bench::{ms, summary};

use crate::cpu::{median, ArmMedians, CpuUse};
use crate::measure::{concurrent, turn};
use crate::plan::{INTERLEAVED_TURNS, ROUNDS};
use crate::server::Server;

/// `ROUNDS` rounds of `agent`'s turns on each arm in turn (so all see the
/// same machine state); the medians of each arm.
pub(crate) async fn rounds(
    arms: &[(&str, std::sync::Arc<Server>)],
    agent: &str,
    clients: usize,
    per_client: usize,
) -> ArmMedians {
    let mut rates = vec![Vec::new(); arms.len()];
    let mut ttfbs = vec![Vec::new(); arms.len()];
    let mut cpus = vec![Vec::new(); arms.len()];
    for _ in 0..ROUNDS {
        for (arm, (label, target)) in arms.iter().enumerate() {
            let (s, a) = (target.clone(), agent.to_owned());
            let pid = target.child.id().unwrap();
            let before = CpuUse::now(pid);
            let (rate, ttfb) = concurrent(label, clients, per_client, move || {
                let (s, a) = (s.clone(), a.clone());
                async move { turn(&s, &a).await }
            })
            .await;
            cpus[arm].push(CpuUse::now(pid).per_turn(before, clients * per_client));
            rates[arm].push(rate);
            ttfbs[arm].push(ms(ttfb));
        }
    }
    let part = |samples: &Vec<[f64; 3]>, n: usize| median(samples.iter().map(|s| s[n]).collect());
    ArmMedians {
        round_rates: rates.clone(),
        rate: rates.into_iter().map(median).collect(),
        ttfb: ttfbs.into_iter().map(median).collect(),
        cpu: cpus
            .iter()
            .map(|samples| [part(samples, 0), part(samples, 1), part(samples, 2)])
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
