//! The id of a conversation: chosen by the client (the AI SDK's chat `id`,
//! a channel's thread), 1-200 characters without NUL.

use std::fmt;

use crate::validation::{refuse_nul_text, ValidationError};

/// Longest conversation id, in characters.
pub const MAX_CONVERSATION_ID_CHARS: usize = 200;

/// Why a conversation id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversationIdError {
    /// It is not 1-200 characters: a malformed request.
    #[error("{field}: must be 1-{MAX_CONVERSATION_ID_CHARS} characters")]
    Length {
        /// The request field, in its wire spelling.
        field: String,
    },
    /// It holds a NUL, which no stored text may.
    #[error(transparent)]
    Nul(ValidationError),
}

impl ConversationIdError {
    /// The request field that was refused.
    pub fn field(&self) -> &str {
        match self {
            Self::Length { field } => field,
            Self::Nul(nul) => &nul.field,
        }
    }
}

/// A conversation id that is 1-200 characters and holds no NUL; made only
/// by [`ConversationId::parse`] (or read back from storage, where only
/// parsed ids are written).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConversationId(String);

impl ConversationId {
    /// Checks `raw`, naming `field` (the body's `id`, a path's
    /// `conversationId`) when it is refused.
    pub fn parse(field: &str, raw: &str) -> Result<Self, ConversationIdError> {
        let length = raw.chars().count();
        if !(1..=MAX_CONVERSATION_ID_CHARS).contains(&length) {
            return Err(ConversationIdError::Length {
                field: field.to_owned(),
            });
        }
        refuse_nul_text(field, raw).map_err(ConversationIdError::Nul)?;
        Ok(Self(raw.to_owned()))
    }

    /// An id read back from storage, which holds parsed ids only.
    pub fn from_stored(stored: String) -> Self {
        Self(stored)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_of_1_to_200_characters_without_nul_parses() {
        assert_eq!(ConversationId::parse("id", "c").unwrap().as_str(), "c");
        let longest = "é".repeat(200);
        assert_eq!(
            ConversationId::parse("id", &longest).unwrap().as_str(),
            longest
        );
    }

    #[test]
    fn an_empty_long_or_nul_id_is_refused_naming_the_field() {
        for bad in [String::new(), "x".repeat(201), "a\0b".to_owned()] {
            let err = ConversationId::parse("conversationId", &bad).unwrap_err();
            assert_eq!(err.field(), "conversationId", "{bad:?}");
        }
    }
}
