//! The agent loop's metrics: turns, tool calls, detached runs and the
//! reaper's actions. Labels are small fixed sets (reasons, kinds,
//! outcomes), never ids.

use std::time::{Duration, Instant};

/// Turns started.
pub const TURNS_STARTED: &str = "toolserver_turns_started_total";
/// Turns finished, by `reason` (the `finish` reason sent, `abort`, or
/// `disconnected`).
pub const TURNS_FINISHED: &str = "toolserver_turns_finished_total";
/// Seconds a turn ran, by `reason`.
pub const TURN_SECONDS: &str = "toolserver_turn_duration_seconds";
/// Model passes of a finished turn.
pub const TURN_STEPS: &str = "toolserver_turn_steps";
/// Tool calls ended, by `kind` (`builtin`, `uploaded`), `mode` (`inline`,
/// `detached`: the launch of a detached call) and `outcome` (`ok`, `error`,
/// `launched`, `cancelled`).
pub const TOOL_CALLS: &str = "toolserver_tool_calls_total";
/// Seconds a tool call took, by `kind`, `mode` and `outcome`.
pub const TOOL_CALL_SECONDS: &str = "toolserver_tool_call_duration_seconds";
/// Detached runs (a detached turn's first run or a continuation) ended, by
/// `outcome`.
pub const DETACHED_RUNS: &str = "toolserver_detached_runs_total";
/// Seconds a detached run took, by `outcome`.
pub const DETACHED_RUN_SECONDS: &str = "toolserver_detached_run_duration_seconds";
/// What the reaper did, by `action`.
pub const REAPER_ACTIONS: &str = "toolserver_reaper_actions_total";
/// CPU seconds (of the thread doing it) spent building one model request:
/// turning the conversation into the provider's messages and encoding the
/// request body.
pub const MODEL_REQUEST_CPU_SECONDS: &str = "toolserver_model_request_cpu_seconds";

/// Gives the agent loop's series their help text (once the recorder is
/// installed).
pub fn describe() {
    use metrics::Unit::Seconds;
    metrics::describe_counter!(TURNS_STARTED, "Turns started, streamed or detached.");
    metrics::describe_counter!(TURNS_FINISHED, "Turns ended, by reason.");
    metrics::describe_histogram!(TURN_SECONDS, Seconds, "Seconds a turn ran, by reason.");
    metrics::describe_histogram!(TURN_STEPS, "Model passes of a finished turn.");
    metrics::describe_counter!(TOOL_CALLS, "Tool calls ended, by kind, mode and outcome.");
    metrics::describe_histogram!(
        TOOL_CALL_SECONDS,
        Seconds,
        "Seconds a tool call took, by kind, mode and outcome."
    );
    metrics::describe_counter!(DETACHED_RUNS, "Detached runs ended, by outcome.");
    metrics::describe_histogram!(
        DETACHED_RUN_SECONDS,
        Seconds,
        "Seconds a detached run took, by outcome."
    );
    metrics::describe_counter!(REAPER_ACTIONS, "What the reaper did, by action.");
    metrics::describe_histogram!(
        MODEL_REQUEST_CPU_SECONDS,
        Seconds,
        "CPU seconds spent building one model request (its messages and encoded body)."
    );
}

/// Runs `build`, a part of building a model request, and records the CPU
/// time of this thread it took. `build` must not wait: the thread's clock
/// counts whatever the thread runs.
pub(crate) fn model_request_cpu<T>(build: impl FnOnce() -> T) -> T {
    let clock = || rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    let before = clock();
    let built = build();
    let after = clock();
    let nanos =
        (after.tv_sec - before.tv_sec) as f64 * 1e9 + (after.tv_nsec - before.tv_nsec) as f64;
    metrics::histogram!(MODEL_REQUEST_CPU_SECONDS).record(nanos / 1e9);
    built
}

/// Counts a turn that starts now.
pub(crate) fn turn_started() -> Instant {
    metrics::counter!(TURNS_STARTED).increment(1);
    Instant::now()
}

/// Records a turn that ended for `reason` after `model_passes` passes.
pub(crate) fn turn_finished(reason: &str, started: Instant, model_passes: u32) {
    let reason = reason.to_owned();
    metrics::counter!(TURNS_FINISHED, "reason" => reason.clone()).increment(1);
    metrics::histogram!(TURN_SECONDS, "reason" => reason).record(started.elapsed().as_secs_f64());
    metrics::histogram!(TURN_STEPS).record(f64::from(model_passes));
}

/// Records one detached run's end.
pub(crate) fn detached_run(outcome: &'static str, took: Duration) {
    metrics::counter!(DETACHED_RUNS, "outcome" => outcome).increment(1);
    metrics::histogram!(DETACHED_RUN_SECONDS, "outcome" => outcome).record(took.as_secs_f64());
}

/// Counts `count` reaper actions of one kind.
pub(crate) fn reaped(action: &'static str, count: u64) {
    if count > 0 {
        metrics::counter!(REAPER_ACTIONS, "action" => action).increment(count);
    }
}

/// Times one tool call; records it once, as `cancelled` if dropped before
/// an outcome.
pub(crate) struct CallMeter {
    kind: &'static str,
    mode: &'static str,
    started: Instant,
    recorded: bool,
}

impl CallMeter {
    /// Starts timing a call of a `kind` tool in `mode`.
    pub(crate) fn start(kind: &'static str, mode: &'static str) -> Self {
        Self {
            kind,
            mode,
            started: Instant::now(),
            recorded: false,
        }
    }

    /// Records the call's `outcome`; later calls do nothing.
    pub(crate) fn finish(&mut self, outcome: &'static str) {
        if self.recorded {
            return;
        }
        self.recorded = true;
        let labels = [
            ("kind", self.kind),
            ("mode", self.mode),
            ("outcome", outcome),
        ];
        metrics::counter!(TOOL_CALLS, &labels).increment(1);
        metrics::histogram!(TOOL_CALL_SECONDS, &labels)
            .record(self.started.elapsed().as_secs_f64());
    }
}

impl Drop for CallMeter {
    fn drop(&mut self) {
        self.finish("cancelled");
    }
}
