//! Which regular expressions the server's JSON Schema engine accepts, so a
//! `pattern` it refuses can be dropped instead of losing the operation.

use std::collections::HashMap;

use serde_json::json;
use toolserver_domain::{InputSchema, ToolLimits};

/// Remembers, per pattern, whether the schema engine compiles it.
#[derive(Debug, Default)]
pub(crate) struct Patterns(HashMap<String, bool>);

impl Patterns {
    /// Whether a schema holding `pattern` compiles.
    pub(crate) fn accepts(&mut self, pattern: &str) -> bool {
        if let Some(known) = self.0.get(pattern) {
            return *known;
        }
        let probe = json!({
            "type": "object",
            "properties": {"value": {"type": "string", "pattern": pattern}},
        });
        let accepted = InputSchema::parse(probe, &ToolLimits::DEFAULT).is_ok();
        self.0.insert(pattern.to_owned(), accepted);
        accepted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_good_regexes_from_bad() {
        let mut patterns = Patterns::default();
        assert!(patterns.accepts("^[a-z]+$"));
        assert!(!patterns.accepts("(unclosed"));
        assert!(!patterns.accepts("(unclosed"));
    }
}
