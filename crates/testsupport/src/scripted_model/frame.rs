//! One server-sent event of a scripted stream, as every wire format writes
//! it.

use serde_json::Value;

/// One server-sent event: its name, if the format names events, and data.
pub(super) struct Frame {
    /// The `event:` field.
    pub(super) event: Option<String>,
    /// The `data:` field.
    pub(super) data: String,
}

impl Frame {
    /// A frame with `data` alone.
    pub(super) fn data(data: &Value) -> Self {
        Self {
            event: None,
            data: data.to_string(),
        }
    }

    /// A frame named after the `type` of its `data`.
    pub(super) fn typed(data: &Value) -> Self {
        Self {
            event: data["type"].as_str().map(str::to_owned),
            data: data.to_string(),
        }
    }
}
