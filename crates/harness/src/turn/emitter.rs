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
    /// Whether a step is open (`start-step` sent, `finish-step` not yet).
    step_open: bool,
    /// The text part that is open, if any.
    open_text: Option<String>,
}

impl Emitter {
    pub(super) fn new(assistant: UiMessage, out: mpsc::Sender<UiChunk>) -> Self {
        Self {
            assistant,
            out,
            step_open: false,
            open_text: None,
        }
    }

    /// Records and sends one chunk.
    pub(super) async fn emit(&mut self, chunk: UiChunk) -> Result<(), ClientGone> {
        match &chunk {
            UiChunk::StartStep => self.step_open = true,
            UiChunk::FinishStep => self.step_open = false,
            UiChunk::TextStart { id } => self.open_text = Some(id.clone()),
            UiChunk::TextEnd { .. } => self.open_text = None,
            _ => {}
        }
        self.assistant.apply(&chunk);
        self.out.send(chunk).await.map_err(|_| ClientGone)
    }

    /// Ends an open text part and an open step, so an early end still
    /// leaves a well-formed stream.
    pub(super) async fn close_open_parts(&mut self) -> Result<(), ClientGone> {
        if let Some(id) = self.open_text.take() {
            self.emit(UiChunk::TextEnd { id }).await?;
        }
        if self.step_open {
            self.emit(UiChunk::FinishStep).await?;
        }
        Ok(())
    }

    /// Resolves when the client has gone away.
    pub(super) async fn gone(&self) {
        self.out.closed().await;
    }
}
