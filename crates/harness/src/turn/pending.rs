//! Async tool calls on the open request: each runs as a task of the turn;
//! the model gets a pending result carrying a status id at once; results are
//! collected as they arrive and injected before the next model pass. The
//! turn owns the tasks, so when the turn ends (or the client goes away) they
//! are aborted, and an aborted runner call is cancelled on its runner.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use serde_json::{json, Value};
use tokio::task::{AbortHandle, JoinSet};

use crate::tools::{RegisteredTool, ToolEvent, ToolEvents};

/// How a background call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// The tool's result.
    Completed(Value),
    /// What went wrong.
    Failed(String),
    /// Stopped before it finished (`async_status` stop), and why.
    Cancelled(String),
}

impl Settled {
    /// Writes `status` and `result` or `error` into an `async_status` answer.
    pub(super) fn describe_into(&self, status: &mut Value) {
        let (name, key, detail) = match self {
            Self::Completed(value) => ("completed", "result", value.clone()),
            Self::Failed(message) => ("failed", "error", json!(message)),
            Self::Cancelled(message) => ("cancelled", "error", json!(message)),
        };
        status["status"] = json!(name);
        status[key] = detail;
    }
}

/// A finished background call, ready to be told to the model.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// The call's status id.
    pub status_id: String,
    /// Model-facing tool name.
    pub tool_name: String,
    /// How it ended.
    pub outcome: Settled,
}

struct Entry {
    tool_name: String,
    logs: Arc<Mutex<Vec<Value>>>,
    abort: AbortHandle,
    state: EntryState,
}

#[derive(Debug, Clone, PartialEq)]
enum EntryState {
    Running,
    /// Settled and waiting to be injected.
    Arrived(Settled),
    /// Settled, and the model has been told.
    Delivered(Settled),
    Stopped,
}

/// The turn's background calls.
#[derive(Default)]
pub(super) struct PendingWork {
    tasks: JoinSet<(String, Settled)>,
    entries: HashMap<String, Entry>,
}

impl PendingWork {
    /// Runs `events`, a call of `tool`, in the background; returns the
    /// pending result for the model.
    pub(super) fn launch(&mut self, tool: &RegisteredTool, mut events: ToolEvents) -> Value {
        let status_id = format!("async_{}", uuid::Uuid::new_v4().simple());
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (task_logs, task_id) = (logs.clone(), status_id.clone());
        let abort = self.tasks.spawn(async move {
            let mut outcome = Settled::Failed("the tool ended without a result".into());
            while let Some(event) = events.next().await {
                match event {
                    ToolEvent::Log { level, message } => {
                        if let Ok(mut logs) = task_logs.lock() {
                            logs.push(json!({"level": level, "message": message}));
                        }
                    }
                    ToolEvent::Snapshot(_) => {}
                    ToolEvent::Output(value) => outcome = Settled::Completed(value),
                    ToolEvent::Failed(failure) => outcome = Settled::Failed(failure.message),
                    ToolEvent::Launched => {
                        outcome = Settled::Failed(
                            "the runner detached a call that was not sent detached".into(),
                        );
                    }
                }
            }
            (task_id, outcome)
        });
        self.entries.insert(
            status_id.clone(),
            Entry {
                tool_name: tool.name.clone(),
                logs,
                abort,
                state: EntryState::Running,
            },
        );
        json!({
            "status": "pending",
            "statusId": status_id,
            "message": format!(
                "{} is running in the background. Its result will be delivered to you when it is ready; \
                 you may keep working meanwhile. async_status can check on it, read its logs or stop it.",
                tool.name
            ),
        })
    }

    /// Whether any call is still running.
    pub(super) fn is_running(&self) -> bool {
        self.entries
            .values()
            .any(|e| e.state == EntryState::Running)
    }

    /// Records calls that finished since the last look, without waiting.
    pub(super) fn collect_finished(&mut self) {
        while let Some(joined) = self.tasks.try_join_next() {
            self.record(joined);
        }
    }

    /// Waits until at least one more call finishes.
    pub(super) async fn wait_for_one(&mut self) {
        while self.is_running() {
            match self.tasks.join_next().await {
                Some(joined) => {
                    let arrived = joined.is_ok();
                    self.record(joined);
                    if arrived {
                        return;
                    }
                }
                None => return,
            }
        }
    }

    fn record(&mut self, joined: Result<(String, Settled), tokio::task::JoinError>) {
        let Ok((status_id, outcome)) = joined else {
            return;
        };
        if let Some(entry) = self.entries.get_mut(&status_id) {
            if entry.state == EntryState::Running {
                entry.state = EntryState::Arrived(outcome);
            }
        }
    }

    /// Takes the arrivals the model has not been told about yet.
    pub(super) fn take_arrivals(&mut self) -> Vec<Arrival> {
        let mut arrivals = Vec::new();
        for (status_id, entry) in &mut self.entries {
            if let EntryState::Arrived(outcome) = &entry.state {
                let outcome = outcome.clone();
                entry.state = EntryState::Delivered(outcome.clone());
                arrivals.push(Arrival {
                    status_id: status_id.clone(),
                    tool_name: entry.tool_name.clone(),
                    outcome,
                });
            }
        }
        arrivals.sort_by(|a, b| a.status_id.cmp(&b.status_id));
        arrivals
    }

    /// Answers an `async_status` call: `status`, `logs` or `stop`.
    pub(super) fn status_call(&mut self, input: &Value) -> Result<Value, String> {
        self.collect_finished();
        let status_id = input
            .get("statusId")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let action = input
            .get("action")
            .and_then(Value::as_str)
            .unwrap_or("status");
        let entry = self.entries.get_mut(status_id).ok_or_else(|| {
            format!("no background call with statusId {status_id:?} in this turn")
        })?;
        match action {
            "logs" => {
                let logs = entry.logs.lock().map(|l| l.clone()).unwrap_or_default();
                Ok(json!({"statusId": status_id, "logs": logs}))
            }
            "stop" => {
                if entry.state == EntryState::Running {
                    entry.abort.abort();
                    entry.state = EntryState::Stopped;
                }
                Ok(describe(status_id, entry))
            }
            "status" => {
                if let EntryState::Arrived(outcome) = &entry.state {
                    entry.state = EntryState::Delivered(outcome.clone());
                }
                Ok(describe(status_id, entry))
            }
            other => Err(format!(
                "unknown action {other:?}: use status, logs or stop"
            )),
        }
    }
}

fn describe(status_id: &str, entry: &Entry) -> Value {
    let mut status = json!({"statusId": status_id, "tool": entry.tool_name});
    match &entry.state {
        EntryState::Running => status["status"] = json!("running"),
        EntryState::Stopped => status["status"] = json!("cancelled"),
        EntryState::Arrived(outcome) | EntryState::Delivered(outcome) => {
            outcome.describe_into(&mut status)
        }
    }
    status
}
