//! Circuit breakers: when a tool whose calls keep failing for their runner
//! or a sandbox limit is refused at once, and for how long.

use clap::Args;
use toolserver_harness::tools::BreakerSettings;

use super::parse::within;
use super::units::millis;

/// Circuit breakers, per account and tool, in each process.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Circuit breakers")]
pub struct BreakerConfig {
    /// Calls of a tool in a row that failed for their runner (lost, refused,
    /// unreachable) or a sandbox limit before its breaker opens: its calls
    /// are then refused at once, in that account and process.
    #[arg(
        long,
        env = "TOOLSERVER_BREAKER_FAILURES",
        default_value_t = BreakerSettings::DEFAULT.failures,
        value_parser = within::<u32>(1..=1000)
    )]
    pub breaker_failures: u32,
    /// Milliseconds an open breaker refuses calls before it lets one through
    /// as a probe; the probe's success closes it, its failure opens it again.
    #[arg(
        long,
        env = "TOOLSERVER_BREAKER_OPEN_MS",
        default_value_t = millis(BreakerSettings::DEFAULT.open_for),
        value_parser = within::<u64>(1..)
    )]
    pub breaker_open_ms: u64,
}

impl BreakerConfig {
    /// The harness's settings of these.
    pub fn settings(&self) -> BreakerSettings {
        BreakerSettings {
            failures: self.breaker_failures,
            open_for: std::time::Duration::from_millis(self.breaker_open_ms),
        }
    }
}
