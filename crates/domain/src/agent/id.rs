//! Agent identifiers and names.

use crate::prefixed_id::prefixed_id;
use crate::validation::refuse_nul_text;
use crate::ValidationError;

prefixed_id!(
    /// A stable agent identifier, shown as `agent_` followed by 32 hex characters.
    AgentId,
    "agent_"
);

/// A human-facing agent name: 1 to 100 characters, not blank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentName(String);

impl AgentName {
    /// Parses a name.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        if raw.trim().is_empty() || raw.chars().count() > 100 {
            return Err(ValidationError::new(
                "name",
                "must be 1-100 characters and not blank",
            ));
        }
        refuse_nul_text("name", raw)?;
        Ok(Self(raw.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_reject_tool_ids() {
        let id = AgentId::generate();
        assert_eq!(AgentId::parse(&id.to_string()), Some(id));
        let as_tool = id.to_string().replace("agent_", "tool_");
        for bad in ["", "agent_", "agent_zz", as_tool.as_str()] {
            assert_eq!(AgentId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn names_are_bounded() {
        assert!(AgentName::parse("support bot").is_ok());
        assert!(AgentName::parse("  ").is_err());
        assert!(AgentName::parse(&"x".repeat(101)).is_err());
    }
}
