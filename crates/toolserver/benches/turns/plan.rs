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
