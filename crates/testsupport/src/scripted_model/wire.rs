//! The wire formats the scripted model speaks, and what it sends for a
//! reply in each: the frames of a stream or an error.

use std::time::Duration;

use serde_json::Value;

use super::frame::Frame;
use super::reply::{Kind, Reply};
use super::{anthropic, gemini, openai};

/// A provider's streaming API.
#[derive(Debug, Clone, Copy)]
pub(super) enum Format {
    /// OpenAI Chat Completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Google Gemini `streamGenerateContent`.
    Gemini,
}

/// What the server sends for one reply.
pub(super) enum Answer {
    /// Server-sent events, in order, with the waits before the first and
    /// before each later one.
    Stream {
        frames: Vec<Frame>,
        first_delay: Duration,
        chunk_delay: Duration,
    },
    /// A plain JSON error answer.
    Error {
        /// HTTP status.
        status: u16,
        /// The format's error body.
        body: Value,
        /// The seconds of a `Retry-After` header, if any.
        retry_after: Option<u64>,
    },
}

impl Format {
    /// Which scripted reply answers `request`: how many model turns it
    /// carries after the user's last own turn.
    pub(super) fn step(self, request: &Value) -> usize {
        match self {
            Self::OpenAi => openai::step(request),
            Self::Anthropic => anthropic::step(request),
            Self::Gemini => gemini::step(request),
        }
    }

    /// What to send for `reply` to a request for `model`.
    pub(super) fn answer(self, reply: &Reply, model: &str) -> Answer {
        match reply.kind() {
            Kind::Error(failure) => Answer::Error {
                status: failure.status,
                body: match self {
                    Self::OpenAi => openai::error_body(&failure.message),
                    Self::Anthropic => anthropic::error_body(failure.status, &failure.message),
                    Self::Gemini => gemini::error_body(failure.status, &failure.message),
                },
                retry_after: failure.retry_after,
            },
            Kind::Stream(streamed) => {
                let (first_delay, chunk_delay) = reply.delays();
                Answer::Stream {
                    frames: match self {
                        Self::OpenAi => openai::frames(streamed, model),
                        Self::Anthropic => anthropic::frames(streamed, model),
                        Self::Gemini => gemini::frames(streamed, model),
                    },
                    first_delay,
                    chunk_delay,
                }
            }
        }
    }
}
