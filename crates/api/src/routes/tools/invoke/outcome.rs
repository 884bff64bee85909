//! Folds a call's frames, as they pass, into its [`InvokeResult`]: the log
//! lines in order, then the output (the returned value, or a generator's
//! last yield) or the error.

use serde_json::Value;
use toolserver_sandbox::Frame;

use super::{InvokeResult, LogLine, ToolError};

/// The result of a call so far.
pub(super) struct Outcome {
    result: InvokeResult,
    last_chunk: Option<Value>,
}

impl Outcome {
    /// Nothing heard yet from call `call_id`.
    pub(super) fn new(call_id: &str) -> Self {
        Self {
            result: InvokeResult {
                call_id: call_id.to_owned(),
                output: None,
                error: None,
                logs: Vec::new(),
            },
            last_chunk: None,
        }
    }

    /// Adds `frame` to the result.
    pub(super) fn push(&mut self, frame: &Frame) {
        let result = &mut self.result;
        match frame {
            Frame::Log { level, message } => result.logs.push(LogLine {
                level: level.clone(),
                message: message.clone(),
            }),
            Frame::Chunk { value } => self.last_chunk = Some(value.clone()),
            Frame::End => result.output = Some(self.last_chunk.take().unwrap_or(Value::Null)),
            Frame::Final { value } => result.output = Some(value.clone()),
            Frame::Error { name, message } => {
                result.error = Some(ToolError {
                    name: name.clone(),
                    message: message.clone(),
                })
            }
            Frame::Launched => result.output = Some(serde_json::json!({"status": "launched"})),
        }
    }

    /// The result once the frames ended: a call that ended without an
    /// output or an error is a runner error.
    pub(super) fn settled(&mut self) -> &InvokeResult {
        let result = &mut self.result;
        if result.output.is_none() && result.error.is_none() {
            result.error = Some(ToolError {
                name: "RunnerError".into(),
                message: "the runner ended the call without a result".into(),
            });
        }
        result
    }

    /// [`Self::settled`], taken.
    pub(super) fn into_result(mut self) -> InvokeResult {
        self.settled();
        self.result
    }
}
