//! Runner metrics: starts and their duration, live runners, idle stops and
//! limit kills, by backend (`local`, `kubernetes`).

use std::time::Duration;

use crate::Limit;

/// Runners started (a worker brought up for a call), by `backend`.
pub const RUNNER_STARTS: &str = "toolserver_runner_starts_total";
/// Seconds from starting a runner to its worker answering, by `backend`.
pub const RUNNER_START_SECONDS: &str = "toolserver_runner_start_duration_seconds";
/// Runners with a live worker in this process, by `backend` (`local`
/// only: Kubernetes pods outlive the server processes that use them).
pub const RUNNERS_LIVE: &str = "toolserver_runners_live";
/// Runners stopped after idling, by `backend`.
pub const RUNNER_EVICTIONS: &str = "toolserver_runner_evictions_total";
/// Workers killed because a call broke a limit, by `limit`.
pub const LIMIT_KILLS: &str = "toolserver_runner_limit_kills_total";

/// Gives the runner series their help text (once the recorder is installed).
pub fn describe() {
    metrics::describe_counter!(RUNNER_STARTS, "Runners brought up for a call, by backend.");
    metrics::describe_histogram!(
        RUNNER_START_SECONDS,
        metrics::Unit::Seconds,
        "Seconds from starting a runner to its worker answering, by backend."
    );
    metrics::describe_gauge!(
        RUNNERS_LIVE,
        "Runners with a live worker in this process, by backend."
    );
    metrics::describe_counter!(
        RUNNER_EVICTIONS,
        "Runners stopped after idling, by backend."
    );
    metrics::describe_counter!(
        LIMIT_KILLS,
        "Workers killed because a call broke a limit, by limit."
    );
}

/// Records a runner of `backend` that started in `took`.
pub fn runner_started(backend: &'static str, took: Duration) {
    metrics::counter!(RUNNER_STARTS, "backend" => backend).increment(1);
    metrics::histogram!(RUNNER_START_SECONDS, "backend" => backend).record(took.as_secs_f64());
}

/// Records that this process now has one more live runner of `backend`.
pub fn runner_live(backend: &'static str) {
    metrics::gauge!(RUNNERS_LIVE, "backend" => backend).increment(1.0);
}

/// Records that a live runner of `backend` is gone.
pub fn runner_gone(backend: &'static str) {
    metrics::gauge!(RUNNERS_LIVE, "backend" => backend).decrement(1.0);
}

/// Counts `count` runners of `backend` stopped for idling.
pub fn runners_evicted(backend: &'static str, count: u64) {
    metrics::counter!(RUNNER_EVICTIONS, "backend" => backend).increment(count);
}

/// Counts a worker killed for breaking `limit`.
pub(crate) fn limit_kill(limit: Limit) {
    let limit = match limit {
        Limit::Memory => "memory",
        Limit::Processes => "processes",
        Limit::Disk => "disk",
        Limit::Cpu => "cpu",
    };
    metrics::counter!(LIMIT_KILLS, "limit" => limit).increment(1);
}
