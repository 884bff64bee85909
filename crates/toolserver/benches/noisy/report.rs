//! Quantiles, ratios and the goal lines.

use std::sync::atomic::Ordering;
use std::time::Duration;

use toolserver_testsupport::bench::summary;

use crate::tally::Tally;

/// Prints the summary of `samples` under `name`; (p50, p99), `None` when
/// there are none.
pub(crate) fn quantiles(name: &str, samples: Vec<Duration>) -> Option<(Duration, Duration)> {
    if samples.is_empty() {
        println!("{name:<40} n=0 (no successful request)");
        return None;
    }
    Some(summary(name, samples))
}

/// `during` over `alone`, `None` when either is missing.
pub(crate) fn ratio(alone: Option<Duration>, during: Option<Duration>) -> Option<f64> {
    Some(during?.as_secs_f64() / alone?.as_secs_f64())
}

/// Prints a goal and whether it was met.
pub(crate) fn goal(name: &str, measured: &str, met: bool) {
    let mark = if met { "PASS" } else { "FAIL" };
    println!("goal: {name:<58} {measured:<26} {mark}");
}

/// Prints a latency goal: `during` at most `limit` times `alone`.
pub(crate) fn ratio_goal(name: &str, ratio: Option<f64>, limit: f64) {
    match ratio {
        Some(r) => goal(name, &format!("{r:.2}x"), r <= limit),
        None => goal(name, "not measured", false),
    }
}

/// Prints the goals every flood shares: B answered, A refused properly,
/// no 5xx.
pub(crate) fn answer_goals(quiet: &[&Tally], noisy: &Tally) {
    let quiet_failures: u64 = quiet
        .iter()
        .map(|t| {
            t.refused()
                + t.unanswered.load(Ordering::Relaxed)
                + t.failed_results.load(Ordering::Relaxed)
        })
        .sum();
    goal(
        "B: every request answered 2xx and succeeded",
        &format!("{quiet_failures} did not"),
        quiet_failures == 0,
    );
    let improper = noisy.improper_refusals();
    goal(
        "A: every refusal a 429/503 with Retry-After",
        &format!("{improper} were not"),
        improper == 0,
    );
    let server_errors: u64 =
        noisy.server_errors() + quiet.iter().map(|t| t.server_errors()).sum::<u64>();
    goal(
        "no 5xx (other than 503 with Retry-After)",
        &format!("{server_errors} 5xx"),
        server_errors == 0,
    );
}
