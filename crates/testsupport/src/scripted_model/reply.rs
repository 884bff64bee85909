//! One scripted answer, told apart from any wire format: the text, tool
//! calls, sources and finish reason a model streams, or the error it
//! answers, and how fast.

use std::time::Duration;

use serde_json::Value;

/// One scripted answer: text, tool calls and sources streamed in the wire
/// format of the request, or an HTTP error.
#[derive(Debug, Clone)]
pub struct Reply {
    kind: Kind,
    chunk_delay: Duration,
    first_delay: Duration,
}

/// What a reply answers.
#[derive(Debug, Clone)]
pub(super) enum Kind {
    /// A stream of text and tool calls.
    Stream(Streamed),
    /// An HTTP error.
    Error(Failure),
}

/// The content a streamed reply carries.
#[derive(Debug, Clone)]
pub(super) struct Streamed {
    /// The text, streamed a word at a time.
    pub(super) text: String,
    /// The tool calls, after the text.
    pub(super) calls: Vec<Call>,
    /// The finish reason that replaces the natural one, in OpenAI's terms.
    pub(super) finish_reason: Option<String>,
    /// The web sources the answer is grounded on.
    pub(super) sources: Vec<Source>,
}

/// One tool call.
#[derive(Debug, Clone)]
pub(super) struct Call {
    /// The call's id.
    pub(super) id: String,
    /// The tool's name.
    pub(super) name: String,
    /// The arguments, a JSON object.
    pub(super) arguments: Value,
}

/// One web source of a grounded answer.
#[derive(Debug, Clone)]
pub(super) struct Source {
    /// The page's address.
    pub(super) url: String,
    /// The page's title.
    pub(super) title: String,
}

/// An error answer.
#[derive(Debug, Clone)]
pub(super) struct Failure {
    /// The HTTP status.
    pub(super) status: u16,
    /// The error's message.
    pub(super) message: String,
    /// The seconds sent in a `Retry-After` header, if any.
    pub(super) retry_after: Option<u64>,
}

impl Reply {
    /// Answers `text`, streamed a word at a time; finishes naturally (OpenAI's
    /// `stop`).
    pub fn text(text: &str) -> Self {
        Self::with(Kind::Stream(Streamed {
            text: text.to_owned(),
            calls: Vec::new(),
            finish_reason: None,
            sources: Vec::new(),
        }))
    }

    /// Calls tool `name` with `arguments`, streamed in two pieces or more
    /// where the format splits arguments; finishes with the format's tool
    /// call reason (OpenAI's `tool_calls`).
    pub fn tool_call(id: &str, name: &str, arguments: Value) -> Self {
        Self::text("").and_tool_call(id, name, arguments)
    }

    /// Answers HTTP `status` with the format's error body carrying `message`.
    pub fn error(status: u16, message: &str) -> Self {
        Self::with(Kind::Error(Failure {
            status,
            message: message.to_owned(),
            retry_after: None,
        }))
    }

    /// Adds a tool call after the text and calls so far.
    ///
    /// # Panics
    /// On an error reply, which streams nothing.
    pub fn and_tool_call(mut self, id: &str, name: &str, arguments: Value) -> Self {
        self.streamed("an error reply cannot make tool calls")
            .calls
            .push(Call {
                id: id.to_owned(),
                name: name.to_owned(),
                arguments,
            });
        self
    }

    /// Adds a web source the answer is grounded on, reported by the formats
    /// that report grounding (Gemini's `groundingMetadata`).
    ///
    /// # Panics
    /// On an error reply, which streams nothing.
    pub fn and_source(mut self, url: &str, title: &str) -> Self {
        self.streamed("an error reply has no sources")
            .sources
            .push(Source {
                url: url.to_owned(),
                title: title.to_owned(),
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

    /// Reports `reason` (e.g. `length`) instead of the natural finish reason;
    /// each format sends it in its own terms.
    ///
    /// # Panics
    /// On an error reply, which streams nothing.
    pub fn finish_reason(mut self, reason: &str) -> Self {
        self.streamed("an error reply has no finish reason")
            .finish_reason = Some(reason.to_owned());
        self
    }

    /// Sends a `Retry-After: <seconds>` header with the error.
    ///
    /// # Panics
    /// On a streamed reply, which is no error.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        let Kind::Error(failure) = &mut self.kind else {
            panic!("only an error reply says when to retry");
        };
        failure.retry_after = Some(seconds);
        self
    }

    /// What the reply answers.
    pub(super) fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The waits before the first chunk and between chunks.
    pub(super) fn delays(&self) -> (Duration, Duration) {
        (self.first_delay, self.chunk_delay)
    }

    fn with(kind: Kind) -> Self {
        Self {
            kind,
            chunk_delay: Duration::ZERO,
            first_delay: Duration::ZERO,
        }
    }

    fn streamed(&mut self, refusal: &str) -> &mut Streamed {
        match &mut self.kind {
            Kind::Stream(streamed) => streamed,
            Kind::Error(_) => panic!("{refusal}"),
        }
    }
}

impl Streamed {
    /// The text's words, each with the space after it.
    pub(super) fn words(&self) -> impl Iterator<Item = &str> {
        self.text.split_inclusive(' ')
    }

    /// The tokens the answer reports: one per word, and per call one for
    /// its name and one per argument piece.
    pub(super) fn output_tokens(&self) -> u64 {
        let calls: usize = self.calls.iter().map(|call| 1 + call.pieces().len()).sum();
        (self.words().count() + calls) as u64
    }
}

impl Call {
    /// The arguments' JSON text cut in two at a character boundary (one
    /// piece when it is a single character).
    pub(super) fn pieces(&self) -> Vec<String> {
        let text = self.arguments.to_string();
        let middle = text
            .char_indices()
            .nth(text.chars().count() / 2)
            .map_or(text.len(), |(at, _)| at);
        let (first, second) = text.split_at(middle);
        [first, second]
            .into_iter()
            .filter(|piece| !piece.is_empty())
            .map(str::to_owned)
            .collect()
    }
}
