//! Writes chunks to the client and, identically, into the assistant message
//! that will be stored, so both always agree.

use tokio::sync::mpsc;

use crate::ui::{UiChunk, UiMessage};

/// The client went away; the turn stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientGone;

/// The output side of a turn.
pub(super) struct Emitter {
    pub(super) assistant: UiMessage,
    out: mpsc::Sender<UiChunk>,
}

impl Emitter {
    pub(super) fn new(assistant: UiMessage, out: mpsc::Sender<UiChunk>) -> Self {
        Self { assistant, out }
    }

    /// Records and sends one chunk.
    pub(super) async fn emit(&mut self, chunk: UiChunk) -> Result<(), ClientGone> {
        self.assistant.apply(&chunk);
        self.out.send(chunk).await.map_err(|_| ClientGone)
    }

    /// Resolves when the client has gone away.
    pub(super) async fn gone(&self) {
        self.out.closed().await;
    }
}
