//! Why a tool call failed: the text the model reads, and the class the
//! ledger records it under.

use std::fmt;

use toolserver_domain::AttemptStatus;

/// A failed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What kind of failure it is.
    pub kind: FailureKind,
    /// What happened, for the model and the ledger.
    pub message: String,
}

/// The classes of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The tool itself failed (it threw, or its upstream answered an error).
    Tool,
    /// The call outlived its deadline.
    Timeout,
    /// The runner died or refused the call while it ran: it may have run.
    RunnerLost,
    /// No runner could be reached (or the bundle read): the call never
    /// started.
    Unreachable,
    /// The tool's circuit breaker is open: the call was refused at once.
    CircuitOpen,
    /// The call exceeded a sandbox limit (memory, output size).
    LimitExceeded,
}

impl FailureKind {
    /// The class of a runner's error frame named `name`.
    pub fn of_runner_error(name: &str) -> Self {
        match name {
            "DeadlineExceeded" => Self::Timeout,
            "LimitExceeded" | "OutputTooLarge" => Self::LimitExceeded,
            "RunnerCrashed" | "RunnerRefused" | "RunnerError" | "WorkerProtocolError" => {
                Self::RunnerLost
            }
            "Unreachable" => Self::Unreachable,
            "CircuitOpen" => Self::CircuitOpen,
            _ => Self::Tool,
        }
    }

    /// The error name a direct call reports for a failure of this class
    /// (read back by [`Self::of_runner_error`]).
    pub fn error_name(self) -> &'static str {
        match self {
            Self::Tool => "ToolError",
            Self::Timeout => "DeadlineExceeded",
            Self::RunnerLost => "RunnerError",
            Self::Unreachable => "Unreachable",
            Self::CircuitOpen => "CircuitOpen",
            Self::LimitExceeded => "LimitExceeded",
        }
    }

    /// Whether a call that failed so may succeed when tried again.
    pub fn transient(self) -> bool {
        matches!(self, Self::Timeout | Self::RunnerLost | Self::Unreachable)
    }

    /// Whether a call that failed so may have done its work anyway.
    pub fn may_have_run(self) -> bool {
        matches!(self, Self::Timeout | Self::RunnerLost)
    }

    /// The ledger status of an attempt that failed so.
    pub fn status(self) -> AttemptStatus {
        match self {
            Self::Tool => AttemptStatus::ToolError,
            Self::Timeout => AttemptStatus::Timeout,
            Self::RunnerLost | Self::Unreachable => AttemptStatus::RunnerLost,
            Self::CircuitOpen => AttemptStatus::Throttled,
            Self::LimitExceeded => AttemptStatus::LimitExceeded,
        }
    }
}

impl Failure {
    /// A failure of class `kind`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// A failure of the tool itself.
    pub fn tool(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Tool, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_errors_are_classed_by_name() {
        let cases = [
            ("DeadlineExceeded", AttemptStatus::Timeout),
            ("OutputTooLarge", AttemptStatus::LimitExceeded),
            ("LimitExceeded", AttemptStatus::LimitExceeded),
            ("RunnerCrashed", AttemptStatus::RunnerLost),
            ("TypeError", AttemptStatus::ToolError),
            ("Unreachable", AttemptStatus::RunnerLost),
        ];
        for (name, status) in cases {
            assert_eq!(
                FailureKind::of_runner_error(name).status(),
                status,
                "{name}"
            );
        }
        for kind in [
            FailureKind::Tool,
            FailureKind::Timeout,
            FailureKind::RunnerLost,
            FailureKind::Unreachable,
            FailureKind::CircuitOpen,
            FailureKind::LimitExceeded,
        ] {
            assert_eq!(FailureKind::of_runner_error(kind.error_name()), kind);
        }
    }
}
