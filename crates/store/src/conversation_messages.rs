//! A conversation's messages as rows of `conversation_messages`, one per
//! message in order (`seq` from 0), under the conversation's `head`, which
//! every write of them draws anew from one sequence (see migration 0030).
//!
//! A write stores a [`MessageTail`]: the messages from the first one that
//! changed on, and how many there are in all; the rows past the end go. A
//! turn that added two messages to a conversation of four hundred writes two
//! rows, not four hundred. A conversation stored before the rows existed
//! (`message_count` NULL) is read from its `messages` column and moved into
//! rows whole by its next write, which must start at 0.

use serde_json::Value;

use crate::StoreError;

/// What a write stores of a conversation's messages: the messages from
/// `from` on, as JSON text, the conversation having `total` messages after
/// the write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageTail {
    /// Index of the first message written; those before it stay as stored.
    pub from: usize,
    /// How many messages the conversation has after the write.
    pub total: usize,
    /// The messages from `from` to `total`, each as JSON text.
    pub messages: Vec<String>,
}

impl MessageTail {
    /// All of `messages`, written over whatever was stored.
    pub fn whole(messages: &[Value]) -> Self {
        Self {
            from: 0,
            total: messages.len(),
            messages: messages.iter().map(Value::to_string).collect(),
        }
    }

    /// `(from, total)` as the statements bind them; a tail that does not
    /// end at `total` is refused.
    pub(crate) fn bounds(&self) -> Result<(i32, i32), StoreError> {
        let invalid = || StoreError::Other(sqlx::Error::Protocol("invalid message tail".into()));
        if self.from + self.messages.len() != self.total {
            return Err(invalid());
        }
        let from = i32::try_from(self.from).map_err(|_| invalid())?;
        let total = i32::try_from(self.total).map_err(|_| invalid())?;
        Ok((from, total))
    }
}

/// SQL: the messages of conversation `c` as one JSON array, from its rows
/// or, not moved yet, from its `messages` column.
macro_rules! stored_messages {
    ($c:literal) => {
        concat!(
            "CASE WHEN ",
            $c,
            ".message_count IS NULL THEN ",
            $c,
            ".messages ELSE \
             (SELECT coalesce(json_agg(m.message ORDER BY m.seq), '[]'::json) \
              FROM conversation_messages m \
              WHERE m.account_id = ",
            $c,
            ".account_id AND m.conversation_id = ",
            $c,
            ".id) END"
        )
    };
}
pub(crate) use stored_messages;

/// SQL: the assignments of a conversation row whose messages a write
/// changes (the write's total is `$5`).
macro_rules! messages_changed {
    () => {
        "head = nextval('conversation_heads'), message_count = $5, messages = '[]'::json, \
         updated_at = now()"
    };
}
pub(crate) use messages_changed;

/// SQL: the condition under which a conversation row takes a write starting
/// at `$4`: moved into rows, or written whole.
macro_rules! tail_fits {
    () => {
        "(message_count IS NOT NULL OR $4 = 0)"
    };
}
pub(crate) use tail_fits;

/// SQL: the common table expressions that write a [`MessageTail`] (`$4`
/// from, `$5` total, `$6` the messages) to conversation `$2` of account
/// `$1`, if a CTE named `owner` (the conversation's row, updated with
/// [`messages_changed`]) returns a row.
macro_rules! tail_written {
    () => {
        "dropped AS ( \
             DELETE FROM conversation_messages \
             WHERE account_id = $1 AND conversation_id = $2 AND seq >= $5 \
               AND EXISTS (SELECT 1 FROM owner)), \
         written AS ( \
             INSERT INTO conversation_messages (account_id, conversation_id, seq, message) \
             SELECT $1, $2, $4 + t.i::integer - 1, t.m::json \
             FROM owner, unnest($6::text[]) WITH ORDINALITY AS t(m, i) \
             ON CONFLICT (account_id, conversation_id, seq) \
             DO UPDATE SET message = EXCLUDED.message)"
    };
}
pub(crate) use tail_written;

/// Parses a stored JSON array of messages (anything else reads as none).
pub(crate) fn message_list(stored: Value) -> Vec<Value> {
    match stored {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}
