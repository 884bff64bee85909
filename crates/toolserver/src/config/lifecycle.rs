//! Detached turns and calls: the job outbox, claims, liveness, retries and
//! the reaper.

use clap::Args;
use toolserver_harness::lifecycle::LifecycleSettings;
use toolserver_harness::HarnessSettings;

use super::parse::within;
use super::units::{millis, secs};

/// The longest completion retry a runner takes (its bound on durations).
const MAX_COMPLETION_RETRY_MS: u64 = (1 << 31) - 1;

/// Detached turns and calls.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Detached turns and calls")]
pub struct LifecycleConfig {
    /// Seconds a detached call may stay pending before it expires.
    #[arg(
        long,
        env = "TOOLSERVER_ASYNC_RESULT_TTL_SECS",
        default_value_t = secs(HarnessSettings::DEFAULT_ASYNC_RESULT_TTL)
    )]
    pub async_result_ttl_secs: u64,
    /// Milliseconds between an idle process's looks at the job outbox.
    #[arg(
        long,
        env = "TOOLSERVER_CONTINUATION_POLL_MS",
        default_value_t = millis(LifecycleSettings::DEFAULT.poll),
        value_parser = within::<u64>(10..)
    )]
    pub continuation_poll_ms: u64,
    /// Milliseconds a job's claim lasts unless renewed (it is renewed every
    /// third of it while the job runs); a process that dies loses its jobs
    /// sooner, by `TOOLSERVER_PROCESS_LIVENESS_MS`.
    #[arg(
        long,
        env = "TOOLSERVER_JOB_CLAIM_MS",
        default_value_t = millis(LifecycleSettings::DEFAULT.claim),
        value_parser = within::<u64>(300..)
    )]
    pub job_claim_ms: u64,
    /// Milliseconds a server process may go without renewing its liveness
    /// row (it renews every third of this, on a connection of its own)
    /// before the others take it for dead: its conversations' turns are
    /// stored as interrupted and freed, and its jobs claimed again.
    #[arg(
        long,
        env = "TOOLSERVER_PROCESS_LIVENESS_MS",
        default_value_t = millis(LifecycleSettings::DEFAULT.process_liveness),
        value_parser = within::<u64>(300..)
    )]
    pub process_liveness_ms: u64,
    /// Most detached runs one process runs at once.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_CONCURRENT_JOBS",
        default_value_t = LifecycleSettings::DEFAULT.max_concurrent_jobs,
        value_parser = within::<usize>(1..)
    )]
    pub max_concurrent_jobs: usize,
    /// Attempts at one job before its turn fails with the last error.
    #[arg(
        long,
        env = "TOOLSERVER_JOB_MAX_ATTEMPTS",
        default_value_t = LifecycleSettings::DEFAULT.max_attempts,
        value_parser = within::<i32>(1..)
    )]
    pub job_max_attempts: i32,
    /// Milliseconds a job waits when its conversation is busy (not an
    /// attempt).
    #[arg(
        long,
        env = "TOOLSERVER_JOB_BUSY_BACKOFF_MS",
        default_value_t = millis(LifecycleSettings::DEFAULT.busy_backoff),
        value_parser = within::<u64>(1..)
    )]
    pub job_busy_backoff_ms: u64,
    /// Milliseconds a job waits after a failed attempt.
    #[arg(
        long,
        env = "TOOLSERVER_JOB_RETRY_BACKOFF_MS",
        default_value_t = millis(LifecycleSettings::DEFAULT.retry_backoff),
        value_parser = within::<u64>(1..)
    )]
    pub job_retry_backoff_ms: u64,
    /// Milliseconds a runner may go without pinging a detached call before
    /// the call fails (or is launched again when its tool's effects are
    /// read or idempotent).
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_LIVENESS_TIMEOUT_MS",
        default_value_t = millis(LifecycleSettings::DEFAULT.liveness_timeout),
        value_parser = within::<u64>(1..)
    )]
    pub runner_liveness_timeout_ms: u64,
    /// Milliseconds between a runner's pings of a detached call it runs.
    #[arg(
        long,
        env = "TOOLSERVER_RUNNER_LIVENESS_INTERVAL_MS",
        default_value_t = millis(LifecycleSettings::DEFAULT.liveness_interval),
        value_parser = within::<u64>(1..)
    )]
    pub runner_liveness_interval_ms: u64,
    /// Milliseconds a runner keeps a detached call's outcome and tries
    /// again to deliver it while the server does not take it (it stopped
    /// answering, or answers 429/5xx); each attempt has the runner's own
    /// timeout (`TOOLSERVER_CALLBACK_TIMEOUT_MS`, a variable of the runner).
    #[arg(
        long,
        env = "TOOLSERVER_COMPLETION_RETRY_MS",
        default_value_t = millis(LifecycleSettings::DEFAULT.completion_retry),
        value_parser = within::<u64>(1..=MAX_COMPLETION_RETRY_MS)
    )]
    pub completion_retry_ms: u64,
    /// Launches in all of one detached call whose tool's effects are read
    /// or idempotent, before a dead runner fails it.
    #[arg(
        long,
        env = "TOOLSERVER_MAX_CALL_LAUNCHES",
        default_value_t = LifecycleSettings::DEFAULT.max_call_launches,
        value_parser = within::<i32>(1..)
    )]
    pub max_call_launches: i32,
    /// Seconds a dispatch group may stay unsealed after its job ended before
    /// the reaper seals it.
    #[arg(
        long,
        env = "TOOLSERVER_UNSEALED_GROUP_GRACE_SECS",
        default_value_t = secs(LifecycleSettings::DEFAULT.unsealed_group_grace)
    )]
    pub unsealed_group_grace_secs: u64,
    /// Seconds a detached turn with no job and no open group may stay
    /// unchanged before the reaper fails it.
    #[arg(
        long,
        env = "TOOLSERVER_STUCK_TURN_GRACE_SECS",
        default_value_t = secs(LifecycleSettings::DEFAULT.stuck_turn_grace)
    )]
    pub stuck_turn_grace_secs: u64,
    /// Seconds an approval may stay undecided before it expires and its
    /// call is denied (the model is told why).
    #[arg(
        long,
        env = "TOOLSERVER_APPROVAL_TTL_SECS",
        default_value_t = secs(LifecycleSettings::DEFAULT.approval_ttl),
        value_parser = within::<u64>(1..)
    )]
    pub approval_ttl_secs: u64,
    /// Seconds after the last decision on an assistant message's approvals
    /// before the reaper resumes a turn that did not resume (its process
    /// died, or the conversation was busy).
    #[arg(
        long,
        env = "TOOLSERVER_APPROVAL_RESUME_GRACE_SECS",
        default_value_t = secs(LifecycleSettings::DEFAULT.approval_resume_grace)
    )]
    pub approval_resume_grace_secs: u64,
    /// Seconds a call waits for its end user to authorize a connection
    /// before the authorization lapses and the call fails.
    #[arg(
        long,
        env = "TOOLSERVER_AUTHORIZATION_TTL_SECS",
        default_value_t = secs(LifecycleSettings::DEFAULT.authorization_ttl),
        value_parser = within::<u64>(1..)
    )]
    pub authorization_ttl_secs: u64,
    /// Seconds before an end user's OAuth access token lapses at which
    /// the reaper refreshes it.
    #[arg(
        long,
        env = "TOOLSERVER_CONNECTION_REFRESH_AHEAD_SECS",
        default_value_t = secs(LifecycleSettings::DEFAULT.connection_refresh_ahead),
        value_parser = within::<u64>(1..)
    )]
    pub connection_refresh_ahead_secs: u64,
    /// Milliseconds between reaper passes, which expire detached calls past
    /// their deadline, fail calls whose runner went silent, seal groups left
    /// open, and fail exhausted jobs and turns that cannot go on.
    #[arg(
        long,
        env = "TOOLSERVER_ASYNC_REAPER_MS",
        default_value_t = millis(LifecycleSettings::DEFAULT.reaper_interval),
        value_parser = within::<u64>(10..)
    )]
    pub async_reaper_ms: u64,
}
