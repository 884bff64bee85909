//! Which tool calls may run: policies as data, evaluated by Cedar.
//!
//! The request Cedar judges: principal `User::"<sub>"` (the token's end
//! user; `User::""` when it names none), action `Action::"<tool name>"`,
//! resource `Tool::"<tool name>"` with attributes `name` and `effects`
//! (`read`, `idempotent`, `side_effect`), and a context holding the call's
//! arguments (`context.input`), the turn (`context.turn.agent`,
//! `context.turn.conversation`, each present only inside one) and the path
//! (`context.path`: `turn`, `detached`, `invoke`, `mcp`).
//!
//! Cedar only permits or forbids; one layer's decision is read from what
//! matched ([`layer`]):
//! 1. a `forbid` that holds, or that fails to evaluate, denies;
//! 2. else a `permit` annotated `@decision("ask")` that holds asks;
//! 3. else a `permit` that holds allows, except that a `side_effect` tool
//!    asks unless the permit is explicit about it (it names the tool in
//!    its action or resource scope, or carries `@decision("allow")`);
//! 4. else nothing allows the call: it is denied.
//!
//! A permit that asks may name who approves: `@approvers("ann, bob")`
//! (end users, the `sub` of their tokens); see [`crate::approvals`].
//!
//! Layers (the account's, then the agent's, then the end user's and the
//! conversation's) each decide alone;
//! the call gets the most restrictive answer (deny > ask > allow), so a
//! lower layer can only narrow ([`layers`]). A layer without policies has
//! no say; without any, calls run as they did before policies existed.

mod account;
mod evaluate;
mod layer;
pub mod layers;
pub mod schema;
mod store;

use std::fmt;

pub use account::{check_layer, schema_of, stack_of, CheckError, Narrowing};
pub use evaluate::CallFacts;
pub use layer::{Layer, LayerError};
pub use layers::{CallGate, LayerName, PolicyStack};
pub use schema::{account_schema, SchemaTool};
pub use store::{AccountPolicies, PolicyCache};

/// What may happen to a call, from the least restrictive to the most (the
/// order is [`Ord`]'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Decision {
    /// The call runs.
    Allow,
    /// The call runs once a person approves it.
    Ask,
    /// The call does not run.
    Deny,
}

impl Decision {
    /// The wire spelling: `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The decision on one call and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// What may happen.
    pub decision: Decision,
    /// The ids of the policies that decided it, as `<layer>:<id>` (none
    /// when no policy matched, or no layer has policies).
    pub policies: Vec<String>,
    /// One sentence per layer that had a say, naming what decided there.
    pub reasons: Vec<String>,
    /// When it asks: the end users who may approve (from the asking
    /// policies' `@approvers`); empty: anyone of the account.
    pub approvers: Vec<String>,
}

impl Verdict {
    /// The verdict when no layer has policies: the call runs.
    pub fn unrestricted() -> Self {
        Self {
            decision: Decision::Allow,
            policies: Vec::new(),
            reasons: vec!["no policies are in force: calls run as configured".to_owned()],
            approvers: Vec::new(),
        }
    }

    /// The sentence a refused call is answered with: the decision and the
    /// reasons of the layers that decided it.
    pub fn explain(&self, tool: &str) -> String {
        let what = match self.decision {
            Decision::Allow => "allows",
            Decision::Ask => "needs a person's approval for",
            Decision::Deny => "denies",
        };
        format!("policy {what} calling {tool}: {}", self.reasons.join("; "))
    }
}
