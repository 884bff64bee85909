//! Runner metrics: starts and their duration, live runners, idle stops and
//! limit kills, by backend (`local`, `kubernetes`); and the runner budget's
//! runners by state, queue waits, refusals and evictions.

use std::time::Duration;

use crate::Limit;

/// Runners started (a worker brought up for a call), by `backend`.
pub const RUNNER_STARTS: &str = "toolserver_runner_starts_total";
/// Seconds from starting a runner to its worker answering, by `backend`.
pub const RUNNER_START_SECONDS: &str = "toolserver_runner_start_duration_seconds";
/// Runners with a live worker in this process, by `backend` (`local`
/// only: Kubernetes pods outlive the server processes that use them).
pub const RUNNERS_LIVE: &str = "toolserver_runners_live";
/// Warm runners started ahead of demand and ready to be claimed, by
/// `backend`.
pub const WARM_READY: &str = "toolserver_runner_warm_ready";
/// Runners whose first start a warm runner served, by `backend`.
pub const WARM_CLAIMS: &str = "toolserver_runner_warm_claims_total";
/// Runners stopped after idling, by `backend`.
pub const RUNNER_EVICTIONS: &str = "toolserver_runner_evictions_total";
/// Workers killed because a call broke a limit, by `limit`.
pub const LIMIT_KILLS: &str = "toolserver_runner_limit_kills_total";

/// Runners the budget counts, by `state`: `live` (all), `busy` (a call in
/// flight), `idle`.
pub const BUDGET_RUNNERS: &str = "toolserver_runner_budget_runners";
/// Seconds calls waited in the budget's queues for a runner.
pub const QUEUE_WAIT_SECONDS: &str = "toolserver_runner_queue_wait_seconds";
/// Calls refused for want of a runner, by `reason` (`queue_full`,
/// `wait_timeout`) and `limit` (`account`, `global`: which cap blocked).
pub const REFUSALS: &str = "toolserver_runner_refusals_total";
/// Idle runners the budget stopped to make room for another.
pub const BUDGET_EVICTIONS: &str = "toolserver_runner_budget_evictions_total";

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
    metrics::describe_gauge!(
        WARM_READY,
        "Warm runners ready to be claimed in this process, by backend."
    );
    metrics::describe_counter!(
        WARM_CLAIMS,
        "Runners whose first start a warm runner served, by backend."
    );
    metrics::describe_counter!(
        RUNNER_EVICTIONS,
        "Runners stopped after idling, by backend."
    );
    metrics::describe_counter!(
        LIMIT_KILLS,
        "Workers killed because a call broke a limit, by limit."
    );
    metrics::describe_gauge!(
        BUDGET_RUNNERS,
        "Runners the runner budget counts, by state (live, busy, idle)."
    );
    metrics::describe_histogram!(
        QUEUE_WAIT_SECONDS,
        metrics::Unit::Seconds,
        "Seconds calls waited in the runner budget's queues for a runner."
    );
    metrics::describe_counter!(
        REFUSALS,
        "Calls refused for want of a runner, by reason and the limit that blocked them."
    );
    metrics::describe_counter!(
        BUDGET_EVICTIONS,
        "Idle runners the runner budget stopped to make room for another."
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

/// Records how many warm runners of `backend` are ready to be claimed.
pub fn warm_ready(backend: &'static str, ready: usize) {
    metrics::gauge!(WARM_READY, "backend" => backend).set(ready as f64);
}

/// Counts a runner of `backend` whose first start a warm runner served.
pub fn warm_claimed(backend: &'static str) {
    metrics::counter!(WARM_CLAIMS, "backend" => backend).increment(1);
}

/// Counts `count` runners of `backend` stopped for idling.
pub fn runners_evicted(backend: &'static str, count: u64) {
    metrics::counter!(RUNNER_EVICTIONS, "backend" => backend).increment(count);
}

/// Records how many runners the budget counts, and how many are busy.
pub(crate) fn budget_runners(live: usize, busy: usize) {
    let idle = live.saturating_sub(busy);
    for (state, count) in [("live", live), ("busy", busy), ("idle", idle)] {
        metrics::gauge!(BUDGET_RUNNERS, "state" => state).set(count as f64);
    }
}

/// Records how long a call waited for a runner.
pub(crate) fn queue_waited(took: Duration) {
    metrics::histogram!(QUEUE_WAIT_SECONDS).record(took.as_secs_f64());
}

/// Counts a call refused for `reason` while the `limit` cap blocked it.
pub(crate) fn refused(reason: &'static str, limit: &'static str) {
    metrics::counter!(REFUSALS, "reason" => reason, "limit" => limit).increment(1);
}

/// Counts an idle runner the budget stopped for room.
pub(crate) fn budget_evicted() {
    metrics::counter!(BUDGET_EVICTIONS).increment(1);
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
