//! One recorded attempt, ended exactly once: by its outcome, or, when it is
//! dropped first (its turn stopped, its client went away), as cancelled.

use serde_json::Value;
use toolserver_domain::AttemptStatus;
use toolserver_store::tool_calls::AttemptEnd;
use uuid::Uuid;

use super::Ledger;
use crate::tools::{Failure, ToolEvent};

/// An attempt recorded as started and not yet ended.
pub struct Attempt {
    ledger: Ledger,
    id: Uuid,
    ended: bool,
}

impl Attempt {
    pub(super) fn new(ledger: Ledger, id: Uuid) -> Self {
        Self {
            ledger,
            id,
            ended: false,
        }
    }

    /// The attempt's id in the ledger.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// Ends the attempt with `output`.
    pub fn succeeded(mut self, output: &Value) {
        let output = Some(self.ledger.payload(output));
        self.end(AttemptStatus::Ok, output, None);
    }

    /// Ends the attempt with `failure`.
    pub fn failed(mut self, failure: &Failure) {
        self.end(failure.kind.status(), None, Some(failure.message.clone()));
    }

    /// Ends the attempt with `status` and `error`.
    pub fn ended(mut self, status: AttemptStatus, error: &str) {
        self.end(status, None, Some(error.to_owned()));
    }

    /// Ends the attempt with `status`, and `output` or `error` if it has
    /// them.
    pub fn finish(mut self, status: AttemptStatus, output: Option<&Value>, error: Option<&str>) {
        let output = output.map(|output| self.ledger.payload(output));
        self.end(status, output, error.map(str::to_owned));
    }

    /// Ends the attempt by `event` if it is a final one; returns it if not.
    pub fn end_by(self, event: &ToolEvent) -> Option<Self> {
        match event {
            ToolEvent::Output(value) => self.succeeded(value),
            ToolEvent::Failed(failure) => self.failed(failure),
            ToolEvent::Log { .. } | ToolEvent::Snapshot(_) | ToolEvent::Launched => {
                return Some(self)
            }
        }
        None
    }

    fn end(
        &mut self,
        status: AttemptStatus,
        output: Option<toolserver_store::tool_calls::Payload>,
        error: Option<String>,
    ) {
        self.ended = true;
        if let Some(writer) = &self.ledger.writer {
            writer.end(AttemptEnd {
                id: self.id,
                status,
                output,
                error,
                ended_at: time::OffsetDateTime::now_utc(),
            });
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.ended {
            let error = Some("the call was stopped before it ended".to_owned());
            self.end(AttemptStatus::Cancelled, None, error);
        }
    }
}
