//! What the benchmark does: its sizes, timings and tools.

use std::time::Duration;

pub(crate) const SECRET: &str = "bench-secret";
/// A's tools, each a runner of its own.
pub(crate) const NOISY_TOOLS: usize = 40;
/// A's concurrent callers in the calls flood.
pub(crate) const CALL_FLOODERS: usize = 200;
/// A's concurrent turns in the turns flood.
pub(crate) const TURN_FLOODERS: usize = 500;
/// B's requests before any measuring.
pub(crate) const WARM_UP: usize = 30;
/// How long B measures alone, at most …
pub(crate) const ALONE: Duration = Duration::from_secs(10);
/// … or this many answers, whichever comes first.
pub(crate) const ALONE_MAX: usize = 2000;
/// How long A floods before B starts measuring.
pub(crate) const RAMP: Duration = Duration::from_secs(1);
/// How long B measures during A's flood (which then stops).
pub(crate) const DURING: Duration = Duration::from_secs(20);
/// How often the server's process tree is read during the calls flood.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// Longest wait for the server's processes to go quiet after a flood.
pub(crate) const SETTLE_MAX: Duration = Duration::from_secs(30);
/// The runner cap when `TOOLSERVER_RUNNER_MAX_LIVE` is unset.
pub(crate) const DEFAULT_MAX_LIVE: usize = 32;
/// Words of A's slow model's reply, one chunk each, and the wait between
/// chunks: with the role, finish and usage chunks, about 2 s a pass.
pub(crate) const SLOW_WORDS: usize = 8;
pub(crate) const SLOW_CHUNK_DELAY: Duration = Duration::from_millis(200);
pub(crate) const ECHO: &str = "export default { execute(ctx, input) { return { echo: input }; } };";
/// Spins the CPU for 200 ms (wall clock), then answers.
pub(crate) const SPIN: &str = "export default { execute() { const end = Date.now() + 200; while (Date.now() < end) {} return { spun: 200 }; } };";
/// Longest wait of one of B's requests (a hung one counts as unanswered).
pub(crate) const QUIET_TIMEOUT: Duration = Duration::from_secs(60);
pub(crate) const CALL_BODY: &str = r#"{"input":{"n":1}}"#;
