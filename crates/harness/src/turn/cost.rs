//! What a turn cost: the model's token counts summed over every pass of
//! its assistant message (over every request that built it: a turn
//! continued after approvals or a detached call adds to what the message
//! already carries), sent as the finish chunk's `messageMetadata.usage` and
//! so stored with the message.

use serde_json::{json, Value};

use crate::provider::Usage;

/// Token counts of a message's passes so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct TurnCost {
    input_tokens: u64,
    output_tokens: u64,
    model_passes: u64,
}

impl TurnCost {
    /// What `metadata` (an assistant message's) says was spent already.
    pub(super) fn carried(metadata: Option<&Value>) -> Self {
        let usage = metadata.map(|metadata| &metadata["usage"]);
        let count = |name: &str| usage.and_then(|usage| usage[name].as_u64()).unwrap_or(0);
        Self {
            input_tokens: count("inputTokens"),
            output_tokens: count("outputTokens"),
            model_passes: count("modelPasses"),
        }
    }

    /// Adds one pass's `usage`.
    pub(super) fn add(&mut self, usage: Usage) {
        self.input_tokens += usage.input_tokens;
        self.output_tokens += usage.output_tokens;
        self.model_passes += 1;
    }

    /// The finish chunk's `messageMetadata`.
    pub(super) fn metadata(&self) -> Value {
        json!({"usage": {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.input_tokens + self.output_tokens,
            "modelPasses": self.model_passes,
        }})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_add_up_over_what_the_message_carried() {
        let mut cost = TurnCost::carried(None);
        cost.add(Usage {
            input_tokens: 10,
            output_tokens: 3,
        });
        cost.add(Usage {
            input_tokens: 20,
            output_tokens: 4,
        });
        let metadata = cost.metadata();
        assert_eq!(
            metadata["usage"],
            json!({"inputTokens": 30, "outputTokens": 7, "totalTokens": 37, "modelPasses": 2})
        );
        let mut continued = TurnCost::carried(Some(&metadata));
        continued.add(Usage {
            input_tokens: 5,
            output_tokens: 1,
        });
        assert_eq!(continued.metadata()["usage"]["totalTokens"], 43);
        assert_eq!(continued.metadata()["usage"]["modelPasses"], 3);
    }
}
