//! The error every domain parser returns: which field, and what is wrong.

/// A value that failed validation, naming the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// The request field that was invalid, in its wire spelling (e.g. `inputSchema`).
    pub field: String,
    /// A human-readable explanation of the problem.
    pub message: String,
}

impl ValidationError {
    /// Builds an error for `field` with `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}
