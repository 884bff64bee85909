//! The worker protocol. `POST /invoke` takes an [`InvokeRequest`] and answers
//! NDJSON [`Frame`]s: `log` frames at any time, then exactly one terminal
//! frame — `end` after a generator's `chunk`s, `final` for a plain return, or
//! `error`. `GET /health` answers counters; `POST /cancel {callId}` aborts.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How the worker gets the bundle: inline bytes (small bundles) or a signed URL.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BundleRef {
    /// Hex SHA-256 the bytes must hash to.
    pub sha256: String,
    /// Base64 bundle bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// Short-lived download URL, used on a cache miss.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// One tool call, as sent to a worker.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvokeRequest {
    /// Unique id of this call.
    pub call_id: String,
    /// Stable across retries of the same logical call.
    pub idempotency_key: String,
    /// The validated tool input.
    pub input: Value,
    /// `defaultConfig` with the caller's options merged over it.
    pub config: Map<String, Value>,
    /// Where the code is.
    pub bundle: BundleRef,
    /// Milliseconds the call may run.
    pub deadline_ms: u64,
    /// Cap on the serialized size of the call's output.
    pub max_output_bytes: u64,
    /// Async lifecycle metadata, when the call is detached.
    #[serde(rename = "async", skip_serializing_if = "Option::is_none")]
    pub async_meta: Option<Value>,
    /// The hosts the tool may reach (its egress allow list); `None` for any
    /// public host. Enforced by the backend, never sent to the worker.
    #[serde(skip)]
    pub egress_allow: Option<toolserver_domain::EgressAllowList>,
    /// The signed grant a runner behind a shared egress proxy presents for
    /// this call (see [`crate::EgressKey`]); set by the backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_token: Option<String>,
    /// The W3C trace context of the call's span, handed to the tool as
    /// `ctx.traceparent` so its own requests can join the trace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Where the tool's `ctx.fetch` asks the server to make requests for
    /// it; without it, `ctx.fetch` is not offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fetch: Option<FetchAccess>,
}

/// The server's fetch route and the grant a call presents to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FetchAccess {
    /// The route's absolute URL.
    pub url: String,
    /// The signed grant, sent as `x-fetch-grant`.
    pub grant: String,
}

impl InvokeRequest {
    /// Whether the call is detached: its async metadata names a completion
    /// URL, so the worker answers one `launched` frame, runs the call in the
    /// background and posts the outcome itself.
    pub fn is_detached(&self) -> bool {
        self.async_meta
            .as_ref()
            .is_some_and(|meta| meta.get("completeUrl").is_some())
    }

    /// Whether the detached call may answer in its launch (its async
    /// metadata has `inlineMs`): its body may run before any frame comes.
    pub fn answers_inline(&self) -> bool {
        self.is_detached()
            && self
                .async_meta
                .as_ref()
                .is_some_and(|meta| meta.get("inlineMs").is_some())
    }
}

/// One NDJSON line from a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub enum Frame {
    /// Console output or `ctx.log` from the tool.
    Log {
        /// `log`, `info`, `warn`, `error` or `debug`.
        level: String,
        /// The text.
        message: String,
    },
    /// One `yield` of a generator `execute`.
    Chunk {
        /// The yielded value.
        value: Value,
    },
    /// A generator finished; its last chunk is the result.
    End,
    /// A plain return.
    Final {
        /// The returned value.
        value: Value,
    },
    /// A detached call started in the background; the worker will post its
    /// outcome to the call's completion URL itself.
    Launched,
    /// The call failed.
    Error {
        /// Error class, e.g. `TypeError`, `DeadlineExceeded`, `BundleIntegrityError`.
        name: String,
        /// What happened.
        message: String,
    },
}

impl Frame {
    /// Whether this frame ends the call.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::End | Self::Final { .. } | Self::Launched | Self::Error { .. }
        )
    }

    /// An error frame.
    pub fn error(name: &str, message: impl Into<String>) -> Self {
        Self::Error {
            name: name.to_owned(),
            message: message.into(),
        }
    }
}

/// Splits a byte stream into lines and parses each as a frame.
#[derive(Debug, Default)]
pub(crate) struct FrameDecoder {
    buffer: Vec<u8>,
}

impl FrameDecoder {
    /// Feeds bytes; returns every complete frame they finish.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<Vec<Frame>, String> {
        self.buffer.extend_from_slice(bytes);
        let mut frames = Vec::new();
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = &line[..line.len() - 1];
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let frame = serde_json::from_slice(line)
                .map_err(|err| format!("bad frame {:?}: {err}", String::from_utf8_lossy(line)))?;
            frames.push(frame);
        }
        Ok(frames)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn decodes_frames_split_across_reads() {
        let mut decoder = FrameDecoder::default();
        assert!(decoder.push(br#"{"t":"chunk","val"#).unwrap().is_empty());
        let frames = decoder
            .push(b"ue\":1}\n{\"t\":\"end\"}\n\n{\"t\":\"log\",\"level\":\"info\",\"message\":\"m\"}\n")
            .unwrap();
        assert_eq!(
            frames,
            vec![
                Frame::Chunk { value: json!(1) },
                Frame::End,
                Frame::Log {
                    level: "info".into(),
                    message: "m".into()
                },
            ]
        );
        assert!(decoder.push(b"not json\n").is_err());
    }
}
