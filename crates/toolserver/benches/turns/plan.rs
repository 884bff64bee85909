//! What the benchmark does: its sizes, limits and tool.

use std::time::Duration;

pub(crate) const SEQUENTIAL_TURNS: usize = 200;
pub(crate) const CLIENTS: usize = 50;
pub(crate) const TURNS_PER_CLIENT: usize = 20;
pub(crate) const OPEN_TURNS: usize = 1000;
/// Rates (turns per second) at which the open-loop arm starts turns, all
/// below the server's capacity on a 2-core machine.
pub(crate) const OPEN_LOOP_RATES: [f64; 3] = [100.0, 200.0, 300.0];
/// Turns started at each open-loop rate.
pub(crate) const OPEN_LOOP_TURNS: usize = 900;
/// Turns of each arm in the turn-by-turn comparison.
pub(crate) const INTERLEAVED_TURNS: usize = 600;
pub(crate) const RESUMES: usize = 100;
/// Rounds of the recording arms, whose medians are compared.
pub(crate) const ROUNDS: usize = 11;
/// Turns per client in the paced comparison.
pub(crate) const PACED_TURNS_PER_CLIENT: usize = 4;
/// Time between the paced model's text chunks.
pub(crate) const PACED_CHUNK_DELAY: Duration = Duration::from_millis(10);
/// Largest share of turns/s that admission checks may cost.
pub(crate) const ADMISSION_COST_GOAL: f64 = 0.02;

/// Turns in a row on one arm when comparing the ledger on and off.
pub(crate) const LEDGER_BLOCK: usize = 50;
/// The most the tool-call ledger may cost, as a share of the turns/s.
pub(crate) const LEDGER_COST_GOAL: f64 = 0.03;
pub(crate) const NATS_URL: &str = "127.0.0.1:4222";
pub(crate) const SECRET: &str = "bench-secret";
/// Account limits no arm of this bench reaches.
pub(crate) const GENEROUS_LIMITS: [(&str, &str); 6] = [
    ("TOOLSERVER_ACCOUNT_OPEN_TURNS", "100000"),
    ("TOOLSERVER_ACCOUNT_CONCURRENT_CALLS", "100000"),
    ("TOOLSERVER_ACCOUNT_CALLS_PER_MINUTE", "100000000"),
    ("TOOLSERVER_ACCOUNT_CALL_BURST", "100000000"),
    ("TOOLSERVER_ACCOUNT_TURNS_PER_MINUTE", "100000000"),
    ("TOOLSERVER_ACCOUNT_TURN_BURST", "100000000"),
];
pub(crate) const ECHO: &str = "export default { execute(ctx, input) { return { echo: input }; } };";

/// How long after an arm's last turn its statements are read: the ledger
/// holds its writes 20 ms after a call.
pub(crate) const STATEMENTS_SETTLE: Duration = Duration::from_millis(100);
/// Statements listed by calls per turn after the main arm.
pub(crate) const TOP_STATEMENTS: usize = 15;
/// The most Postgres CPU a turn of the main arm may cost, in milliseconds.
pub(crate) const POSTGRES_CPU_GOAL_MS: f64 = 0.8;
/// The most statements a turn of the main arm may run.
pub(crate) const STATEMENTS_GOAL: f64 = 5.0;
/// Turns per client that warm the AI SDK peer up (its JavaScript compiled)
/// before it is measured.
pub(crate) const PEER_WARMUP_TURNS: usize = 4;
/// The least turns/s of the server over the AI SDK peer's.
pub(crate) const PEER_RATIO_GOAL: f64 = 3.0;

/// Sequential turns on one conversation in the growth arm.
pub(crate) const GROWTH_TURNS: usize = 1000;
/// Rounds of the growth arm, each on a new conversation; its verdicts are
/// on the medians of the rounds' ratios.
pub(crate) const GROWTH_ROUNDS: usize = 3;
/// Bytes of text of each of the growth arm's user messages.
pub(crate) const GROWTH_MESSAGE_BYTES: usize = 400;
/// The growth arm's windows of turns measured, by their last turn
/// (counted from 1).
pub(crate) const GROWTH_WINDOW_ENDS: [usize; 4] = [10, 100, 500, 1000];
/// Turns in each of the growth arm's windows.
pub(crate) const GROWTH_WINDOW: usize = 10;
/// The most the growth arm's last window may cost per turn, over its first
/// window, in Postgres CPU and in server CPU less the model request's.
pub(crate) const GROWTH_RATIO_GOAL: f64 = 1.2;
/// The growth arm's server: conversation limits its conversation stays
/// within (two messages a turn, about 1 KiB of JSON each), and its timed
/// loops (reaper, job claims, liveness renewal) slowed to a few a minute,
/// so that the windows, of a fraction of a second each, hold the turns'
/// work; what the loops still do is measured with no turn running and
/// subtracted ([`GROWTH_IDLE`]).
pub(crate) const GROWTH_SERVER: [(&str, &str); 5] = [
    ("TOOLSERVER_MAX_CONVERSATION_MESSAGES", "10000"),
    ("TOOLSERVER_MAX_CONVERSATION_BYTES", "67108864"),
    ("TOOLSERVER_ASYNC_REAPER_MS", "20000"),
    ("TOOLSERVER_CONTINUATION_POLL_MS", "20000"),
    ("TOOLSERVER_PROCESS_LIVENESS_MS", "60000"),
];
/// How long the growth arm measures its server with no turn running.
pub(crate) const GROWTH_IDLE: Duration = Duration::from_secs(5);

/// How a measure fares against its goal.
pub(crate) fn verdict(met: bool) -> &'static str {
    if met {
        "PASS"
    } else {
        "FAIL"
    }
}
