//! Layers of policies, from the widest to the narrowest: the account's,
//! then the agent's, then the end user's and the conversation's. Each layer with policies decides alone; the call gets the most restrictive
//! of their decisions (deny > ask > allow), so a lower layer can narrow
//! what the one above allows but never widen it. Layers without policies
//! have no say; with no layer at all, every call runs as configured.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use toolserver_domain::{CallPath, ToolEffects};

use super::evaluate::{could_run, decide, CallFacts, LayerAnswer};
use super::layer::Layer;
use super::{Decision, Verdict};

/// Where a layer's policies come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LayerName {
    /// The account's (`PUT /policies`).
    Account,
    /// The agent's (its config's `policies`).
    Agent,
    /// The end user's (`PUT /policies/users/{user}`).
    User,
    /// The conversation's (`PUT /conversations/{conversationId}/policies`).
    Conversation,
}

impl LayerName {
    /// The name in ids and reasons.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Account => "account",
            Self::Agent => "agent",
            Self::User => "user",
            Self::Conversation => "conversation",
        }
    }
}

impl fmt::Display for LayerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The layers in force for a call, widest first.
#[derive(Debug, Clone, Default)]
pub struct PolicyStack {
    layers: Vec<(LayerName, Arc<Layer>)>,
}

impl PolicyStack {
    /// This stack with `layer` below the others (an empty layer is left
    /// out: it has no say).
    pub fn with(mut self, name: LayerName, layer: Arc<Layer>) -> Self {
        if !layer.is_empty() {
            self.layers.push((name, layer));
        }
        self
    }

    /// Whether no layer has policies (calls run as configured).
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The decision on the call of `facts` with `input`.
    pub fn decide(&self, facts: &CallFacts, input: &Value) -> Verdict {
        if self.is_empty() {
            return Verdict::unrestricted();
        }
        let answers: Vec<LayerAnswer> = match facts.prepare(Some(input)) {
            Ok(call) => self
                .layers
                .iter()
                .map(|(name, layer)| decide(layer, name.as_str(), facts, &call))
                .collect(),
            Err(error) => vec![LayerAnswer {
                decision: Decision::Deny,
                policies: Vec::new(),
                reason: format!("the call could not be put to the policies: {error}"),
                approvers: Vec::new(),
            }],
        };
        let decision = answers
            .iter()
            .map(|answer| answer.decision)
            .max()
            .unwrap_or(Decision::Allow);
        let mut verdict = Verdict {
            decision,
            policies: Vec::new(),
            reasons: Vec::new(),
            approvers: Vec::new(),
        };
        for answer in answers.into_iter().filter(|a| a.decision == decision) {
            verdict.policies.extend(answer.policies);
            verdict.reasons.push(answer.reason);
            verdict.approvers.extend(answer.approvers);
        }
        verdict.approvers.sort();
        verdict.approvers.dedup();
        verdict
    }

    /// Whether some input could let the tool of `facts` run: false when a
    /// layer denies it whatever the input (such a tool is not offered).
    pub fn could_run(&self, facts: &CallFacts) -> bool {
        if self.is_empty() {
            return true;
        }
        match facts.prepare(None) {
            Ok(call) => self
                .layers
                .iter()
                .all(|(_, layer)| could_run(layer, facts, &call)),
            Err(_) => false,
        }
    }
}

/// The policies of one turn or request, with who calls and where: judges
/// each call of a tool.
#[derive(Debug, Clone)]
pub struct CallGate {
    stack: PolicyStack,
    user: Option<String>,
    path: CallPath,
    agent: Option<String>,
    conversation: Option<String>,
}

impl CallGate {
    /// A gate of `stack` for calls by `user` on `path`.
    pub fn new(stack: PolicyStack, user: Option<String>, path: CallPath) -> Self {
        Self {
            stack,
            user,
            path,
            agent: None,
            conversation: None,
        }
    }

    /// This gate for a turn of `agent` (in `conversation`, when known).
    pub fn in_turn(mut self, agent: String, conversation: Option<String>) -> Self {
        self.agent = Some(agent);
        self.conversation = conversation;
        self
    }

    /// Whether no policy is in force.
    pub fn is_open(&self) -> bool {
        self.stack.is_empty()
    }

    /// The decision on calling `tool` (with `effects`) with `input`.
    pub fn decide(&self, tool: &str, effects: ToolEffects, input: &Value) -> Verdict {
        self.stack.decide(&self.facts(tool, effects), input)
    }

    /// Whether `tool` is offered: some input could let it run.
    pub fn offers(&self, tool: &str, effects: ToolEffects) -> bool {
        self.stack.could_run(&self.facts(tool, effects))
    }

    fn facts(&self, tool: &str, effects: ToolEffects) -> CallFacts {
        CallFacts {
            user: self.user.clone(),
            tool: tool.to_owned(),
            effects,
            path: self.path,
            agent: self.agent.clone(),
            conversation: self.conversation.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn layer(text: &str) -> Arc<Layer> {
        Arc::new(Layer::parse(text).unwrap())
    }

    fn gate(stack: PolicyStack) -> CallGate {
        CallGate::new(stack, Some("ann".into()), CallPath::Invoke)
    }

    #[test]
    fn deny_beats_ask_beats_allow_and_arguments_count() {
        let stack = PolicyStack::default().with(
            LayerName::Account,
            layer(
                r#"@id("small") permit(principal, action == Action::"refund", resource) when { context.input.amount < 500 };
                   @id("review") @decision("ask") permit(principal, action == Action::"refund", resource) when { context.input.amount >= 500 && context.input.amount < 1000 };
                   @id("never-ann") forbid(principal == User::"ann", action == Action::"wipe", resource);
                   @id("reads") permit(principal, action, resource) when { resource.effects == "read" };"#,
            ),
        );
        let gate = gate(stack);
        let refund = |amount: i64| {
            gate.decide(
                "refund",
                ToolEffects::SideEffect,
                &json!({"amount": amount}),
            )
        };
        let small = refund(499);
        assert_eq!(small.decision, Decision::Allow, "{small:?}");
        assert_eq!(small.policies, ["account:small"]);
        assert_eq!(refund(501).decision, Decision::Ask);
        assert_eq!(refund(501).policies, ["account:review"]);
        assert_eq!(refund(5000).decision, Decision::Deny);
        let wipe = gate.decide("wipe", ToolEffects::Read, &json!({}));
        assert_eq!(wipe.decision, Decision::Deny);
        assert_eq!(wipe.policies, ["account:never-ann"]);
        assert!(!gate.offers("wipe", ToolEffects::Read));
        assert!(gate.offers("refund", ToolEffects::SideEffect));
        assert!(gate.offers("lookup", ToolEffects::Read));
        assert!(!gate.offers("delete", ToolEffects::SideEffect));
        let broad = gate.decide("write", ToolEffects::SideEffect, &json!({}));
        assert_eq!(broad.decision, Decision::Deny, "{broad:?}");
    }

    #[test]
    fn a_side_effect_tool_asks_unless_a_policy_is_explicit_about_it() {
        let broad = gate(PolicyStack::default().with(
            LayerName::Account,
            layer("permit(principal, action, resource);"),
        ));
        assert_eq!(
            broad
                .decide("write", ToolEffects::SideEffect, &json!({}))
                .decision,
            Decision::Ask
        );
        assert_eq!(
            broad.decide("read", ToolEffects::Read, &json!({})).decision,
            Decision::Allow
        );
        let explicit = gate(PolicyStack::default().with(
            LayerName::Account,
            layer(r#"@decision("allow") permit(principal, action, resource);"#),
        ));
        assert_eq!(
            explicit
                .decide("write", ToolEffects::SideEffect, &json!({}))
                .decision,
            Decision::Allow
        );
    }

    #[test]
    fn a_lower_layer_only_narrows() {
        let account = layer(
            r#"@id("everything") @decision("allow") permit(principal, action, resource);
               @id("no-wipe") forbid(principal, action == Action::"wipe", resource);"#,
        );
        let agent = layer(
            r#"@id("wipe-too") @decision("allow") permit(principal, action, resource);
               @id("no-search") forbid(principal, action == Action::"search", resource);"#,
        );
        let stack = PolicyStack::default()
            .with(LayerName::Account, account)
            .with(LayerName::Agent, agent);
        let gate = gate(stack);
        let wipe = gate.decide("wipe", ToolEffects::Read, &json!({}));
        assert_eq!(wipe.decision, Decision::Deny);
        assert_eq!(wipe.policies, ["account:no-wipe"]);
        let search = gate.decide("search", ToolEffects::Read, &json!({}));
        assert_eq!(search.policies, ["agent:no-search"]);
        let other = gate.decide("other", ToolEffects::Read, &json!({}));
        assert_eq!(other.decision, Decision::Allow);
    }

    #[test]
    fn a_forbid_that_cannot_be_evaluated_denies() {
        let gate = gate(PolicyStack::default().with(
            LayerName::Account,
            layer(
                r#"@decision("allow") permit(principal, action, resource);
                   @id("cap") forbid(principal, action, resource) when { context.input.amount > 10 };"#,
            ),
        ));
        let missing = gate.decide("pay", ToolEffects::SideEffect, &json!({"amount": 1.5}));
        assert_eq!(missing.decision, Decision::Deny, "{missing:?}");
        assert_eq!(missing.policies, ["account:cap"]);
        assert!(gate.offers("pay", ToolEffects::SideEffect));
    }
}
