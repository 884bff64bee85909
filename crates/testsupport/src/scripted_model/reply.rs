//! One scripted answer, and the Chat Completions chunks that stream it.

use std::time::Duration;

use serde_json::{json, Value};

/// Prompt tokens every streamed reply reports.
const PROMPT_TOKENS: u64 = 10;

/// One scripted answer: text and tool calls streamed in the OpenAI wire
/// format, or an HTTP error.
#[derive(Debug, Clone)]
pub struct Reply {
    kind: Kind,
    chunk_delay: Duration,
    first_delay: Duration,
}

#[derive(Debug, Clone)]
enum Kind {
    Stream {
        text: String,
        calls: Vec<Call>,
        finish_reason: Option<String>,
    },
    Error {
        status: u16,
        message: String,
    },
}

#[derive(Debug, Clone)]
struct Call {
    id: String,
    name: String,
    arguments: Value,
}

/// What the server sends for one reply.
pub(super) enum Answer {
    /// `data:` payloads, in order (`[DONE]` included), with the waits before
    /// the first and before each later one.
    Stream {
        frames: Vec<String>,
        first_delay: Duration,
        chunk_delay: Duration,
    },
    /// A plain JSON error answer.
    Error {
        /// HTTP status.
        status: u16,
        /// The `{"error": {"message": …}}` body.
        body: Value,
    },
}

impl Reply {
    /// Answers `text`, streamed a word at a time; finishes with `stop`.
    pub fn text(text: &str) -> Self {
        Self::stream(text.to_owned(), Vec::new())
    }

    /// Calls tool `name` with `arguments`, streamed in two pieces or more;
    /// finishes with `tool_calls`.
    pub fn tool_call(id: &str, name: &str, arguments: Value) -> Self {
        Self::stream(String::new(), Vec::new()).and_tool_call(id, name, arguments)
    }

    /// Answers HTTP `status` with `{"error": {"message": message}}`.
    pub fn error(status: u16, message: &str) -> Self {
        Self {
            kind: Kind::Error {
                status,
                message: message.to_owned(),
            },
            chunk_delay: Duration::ZERO,
            first_delay: Duration::ZERO,
        }
    }

    /// Adds a tool call after the text and calls so far.
    ///
    /// # Panics
    /// On an error reply, which streams nothing.
    pub fn and_tool_call(mut self, id: &str, name: &str, arguments: Value) -> Self {
        let Kind::Stream { calls, .. } = &mut self.kind else {
            panic!("an error reply cannot make tool calls");
        };
        calls.push(Call {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments,
        });
        self
    }

    /// Waits `delay` between chunks (a slow model).
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// Waits `delay` before the first chunk, after the headers are sent.
    pub fn delay_first(mut self, delay: Duration) -> Self {
        self.first_delay = delay;
        self
    }

    /// Reports `reason` (e.g. `length`) instead of the natural finish reason.
    ///
    /// # Panics
    /// On an error reply, which streams nothing.
    pub fn finish_reason(mut self, reason: &str) -> Self {
        let Kind::Stream { finish_reason, .. } = &mut self.kind else {
            panic!("an error reply has no finish reason");
        };
        *finish_reason = Some(reason.to_owned());
        self
    }

    fn stream(text: String, calls: Vec<Call>) -> Self {
        Self {
            kind: Kind::Stream {
                text,
                calls,
                finish_reason: None,
            },
            chunk_delay: Duration::ZERO,
            first_delay: Duration::ZERO,
        }
    }

    /// What to send to a request for `model`.
    pub(super) fn answer(&self, model: &str) -> Answer {
        match &self.kind {
            Kind::Error { status, message } => Answer::Error {
                status: *status,
                body: json!({"error": {"message": message, "type": "scripted_error"}}),
            },
            Kind::Stream {
                text,
                calls,
                finish_reason,
            } => Answer::Stream {
                frames: frames(model, text, calls, finish_reason.as_deref()),
                first_delay: self.first_delay,
                chunk_delay: self.chunk_delay,
            },
        }
    }
}

/// The role chunk, one chunk per delta, the finish chunk, the usage chunk
/// and `[DONE]`.
fn frames(model: &str, text: &str, calls: &[Call], finish_reason: Option<&str>) -> Vec<String> {
    let mut deltas: Vec<Value> = text
        .split_inclusive(' ')
        .map(|word| json!({"content": word}))
        .collect();
    for (index, call) in calls.iter().enumerate() {
        deltas.push(json!({"tool_calls": [{
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }]}));
        for piece in halves(&call.arguments.to_string()) {
            deltas
                .push(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}));
        }
    }
    let natural = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let completion_tokens = deltas.len() as u64;
    let choice = |delta: Value, finish: Option<&str>| {
        chunk(
            model,
            json!([{"index": 0, "delta": delta, "finish_reason": finish}]),
        )
    };
    let mut frames = vec![choice(json!({"role": "assistant", "content": ""}), None)];
    frames.extend(deltas.into_iter().map(|delta| choice(delta, None)));
    frames.push(choice(json!({}), Some(finish_reason.unwrap_or(natural))));
    let mut usage = chunk(model, json!([]));
    usage["usage"] = json!({
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": completion_tokens,
        "total_tokens": PROMPT_TOKENS + completion_tokens,
    });
    frames.push(usage);
    let mut frames: Vec<String> = frames.iter().map(Value::to_string).collect();
    frames.push("[DONE]".to_owned());
    frames
}

fn chunk(model: &str, choices: Value) -> Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": choices,
    })
}

/// `text` cut in two at a character boundary (one piece when it is a
/// single character).
fn halves(text: &str) -> Vec<&str> {
    let middle = text
        .char_indices()
        .nth(text.chars().count() / 2)
        .map_or(text.len(), |(at, _)| at);
    let (first, second) = text.split_at(middle);
    [first, second]
        .into_iter()
        .filter(|piece| !piece.is_empty())
        .collect()
}
