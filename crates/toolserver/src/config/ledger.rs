//! The tool-call ledger: how much of each payload is kept, how long
//! payloads and rows are kept, and how its writer and keeper work.

use clap::Args;
use toolserver_harness::ledger::LedgerSettings;

use super::parse::within;
use super::units::millis;

/// The tool-call ledger.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Tool-call ledger")]
pub struct LedgerConfig {
    /// Record every attempt of an inline call (turns, direct invokes, MCP
    /// calls); `false`: they are not recorded (detached calls still are, by
    /// the database), which exists to measure what recording costs.
    #[arg(
        long,
        env = "TOOLSERVER_LEDGER",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub ledger: bool,
    /// Bytes of each call's input and output JSON the ledger keeps; a longer
    /// payload keeps its head, with the SHA-256 and length of the whole.
    #[arg(
        long,
        env = "TOOLSERVER_LEDGER_PAYLOAD_BYTES",
        default_value_t = LedgerSettings::DEFAULT.payload_bytes,
        value_parser = within::<usize>(0..=16 * 1024 * 1024)
    )]
    pub ledger_payload_bytes: usize,
    /// Seconds after its end an attempt keeps its payloads' text; its row
    /// (status, times, digests, lengths) stays until
    /// `TOOLSERVER_LEDGER_RETENTION_SECS`.
    #[arg(
        long,
        env = "TOOLSERVER_LEDGER_PAYLOAD_RETENTION_SECS",
        default_value_t = LedgerSettings::DEFAULT.payload_retention.as_secs(),
        value_parser = within::<u64>(0..)
    )]
    pub ledger_payload_retention_secs: u64,
    /// Seconds after its end an attempt is kept in the ledger at all.
    #[arg(
        long,
        env = "TOOLSERVER_LEDGER_RETENTION_SECS",
        default_value_t = LedgerSettings::DEFAULT.retention.as_secs(),
        value_parser = within::<u64>(60..)
    )]
    pub ledger_retention_secs: u64,
    /// Milliseconds between a process's rounds of ledger upkeep: ending the
    /// attempts of dead server processes and applying retention.
    #[arg(
        long,
        env = "TOOLSERVER_LEDGER_KEEPER_MS",
        default_value_t = millis(LedgerSettings::DEFAULT.keeper_interval),
        value_parser = within::<u64>(10..)
    )]
    pub ledger_keeper_ms: u64,
    /// Milliseconds an attempt must have run before it is ended
    /// `server_lost` once its server process is dead.
    #[arg(
        long,
        env = "TOOLSERVER_LEDGER_LOST_AFTER_MS",
        default_value_t = millis(LedgerSettings::DEFAULT.lost_after),
        value_parser = within::<u64>(0..)
    )]
    pub ledger_lost_after_ms: u64,
    /// Most attempts the ledger's writer records in one statement.
    #[arg(
        long,
        env = "TOOLSERVER_LEDGER_MAX_BATCH",
        default_value_t = LedgerSettings::DEFAULT.max_batch,
        value_parser = within::<usize>(1..=10_000)
    )]
    pub ledger_max_batch: usize,
    /// Milliseconds a call's start waits before it is written: a call that
    /// ends within them is written once, as one finished row, rather than
    /// inserted and then updated. A server process that dies loses the
    /// starts it holds (the calls of its last moment).
    #[arg(
        long,
        env = "TOOLSERVER_LEDGER_HOLD_MS",
        default_value_t = millis(LedgerSettings::DEFAULT.hold),
        value_parser = within::<u64>(0..=10_000)
    )]
    pub ledger_hold_ms: u64,
    /// Most attempts' starts the ledger's writer holds unwritten while
    /// Postgres is slow or cannot be reached; a call beyond them is refused
    /// without running.
    #[arg(
        long,
        env = "TOOLSERVER_LEDGER_MAX_UNWRITTEN",
        default_value_t = LedgerSettings::DEFAULT.max_unwritten,
        value_parser = within::<usize>(1..)
    )]
    pub ledger_max_unwritten: usize,
}

impl LedgerConfig {
    /// The harness's settings of these.
    pub fn settings(&self) -> LedgerSettings {
        use std::time::Duration;
        LedgerSettings {
            payload_bytes: self.ledger_payload_bytes,
            payload_retention: Duration::from_secs(self.ledger_payload_retention_secs),
            retention: Duration::from_secs(self.ledger_retention_secs),
            keeper_interval: Duration::from_millis(self.ledger_keeper_ms),
            lost_after: Duration::from_millis(self.ledger_lost_after_ms),
            max_batch: self.ledger_max_batch,
            hold: Duration::from_millis(self.ledger_hold_ms),
            max_unwritten: self.ledger_max_unwritten,
            recording: self.ledger,
        }
    }
}
