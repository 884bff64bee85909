//! The units settings are written in: a default kept as a [`Duration`] (or
//! in bytes) by the crate that uses it becomes the number its variable
//! takes.

use std::time::Duration;

/// Bytes in a MiB.
pub const MIB: u64 = 1024 * 1024;

/// Whole seconds of `duration`.
pub const fn secs(duration: Duration) -> u64 {
    duration.as_secs()
}

/// Whole milliseconds of `duration`.
pub const fn millis(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

/// Whole microseconds of `duration`.
pub const fn micros(duration: Duration) -> u64 {
    duration.as_micros() as u64
}

/// Whole MiB of `bytes`.
pub const fn mib(bytes: u64) -> u64 {
    bytes / MIB
}
