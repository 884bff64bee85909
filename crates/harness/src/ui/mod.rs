//! The Vercel AI SDK UI message stream (protocol v1): the chunks a turn
//! emits, the `UIMessage` they build, and the conversion of stored messages
//! into model-facing history.

mod chunk;
mod convert;
mod interrupted;
mod message;

pub use chunk::UiChunk;
pub use convert::to_model_history;
pub use interrupted::{with_interrupted_turn, INTERRUPTED_KEY};
pub use message::{Approval, ToolPart, ToolState, UiMessage, UiPart};
