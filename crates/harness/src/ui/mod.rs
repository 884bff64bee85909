//! The Vercel AI SDK UI message stream (protocol v1): the chunks a turn
//! emits, the `UIMessage` they build, and the conversion of stored messages
//! into model-facing history.

mod chunk;
mod convert;
mod message;

pub use chunk::UiChunk;
pub use convert::to_model_history;
pub use message::{Approval, ToolPart, ToolState, UiMessage, UiPart};
