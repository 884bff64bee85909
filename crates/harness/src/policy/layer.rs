//! One layer of policies, parsed once: its Cedar policy set, each policy
//! named by its `@id` annotation (else `policy<n>`, its place in the text
//! from 0) and what it decides when it matches: a `forbid` denies; a
//! `permit` asks when annotated `@decision("ask")`, and otherwise allows,
//! outright for a tool it is explicit about (`@decision("allow")`, or a
//! scope that names the tool as the action or the resource).

use std::collections::HashMap;
use std::str::FromStr;

use cedar_policy::{
    ActionConstraint, Effect, EntityUid, Policy, PolicyId, PolicySet, ResourceConstraint, Schema,
    ValidationMode, Validator,
};

/// Longest policy text of one layer, in characters.
pub const MAX_POLICY_CHARS: usize = 262_144;

/// Why policy text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayerError {
    /// The text is not Cedar, or uses what policies here may not.
    #[error("{0}")]
    Syntax(String),
    /// Cedar's validator refused it against the account's schema.
    #[error("{0}")]
    Invalid(String),
}

/// What a policy decides when it matches.
#[derive(Debug, Clone)]
pub(super) struct Rule {
    /// The name reported (its `@id`, else `policy<n>`).
    pub(super) name: String,
    /// A `forbid`.
    pub(super) forbid: bool,
    /// A `permit` annotated `@decision("ask")`.
    pub(super) ask: bool,
    /// `@decision("allow")`: explicit about every tool it matches.
    pub(super) allow_all: bool,
    /// The tools its scope names (action or resource).
    pub(super) names: Vec<String>,
    /// Who may approve what it asks about (`@approvers("ann, bob")`: end
    /// users); empty: anyone of the account.
    pub(super) approvers: Vec<String>,
}

impl Rule {
    /// Whether it allows `tool` outright when it matches (see the module).
    pub(super) fn explicit_about(&self, tool: &str) -> bool {
        self.allow_all || self.names.iter().any(|name| name == tool)
    }
}

/// A parsed layer of policies (by default, none).
#[derive(Debug, Clone, Default)]
pub struct Layer {
    set: PolicySet,
    pub(super) rules: HashMap<PolicyId, Rule>,
    /// The policies whose action scope is any action: all a tool the
    /// layer never names is judged by.
    generic: PolicySet,
    /// Per tool named in an action scope, the policies that can match a
    /// call of it (those naming it, and the generic ones).
    by_tool: HashMap<String, PolicySet>,
}

impl Layer {
    /// Parses `text`: Cedar syntax, static policies only (no templates),
    /// `@id`s unique and not empty, `@decision` only `"ask"` or `"allow"`
    /// and only on a `permit`.
    pub fn parse(text: &str) -> Result<Self, LayerError> {
        let chars = text.chars().count();
        if chars > MAX_POLICY_CHARS {
            return Err(LayerError::Syntax(format!(
                "the policies are {chars} characters; the limit is {MAX_POLICY_CHARS}"
            )));
        }
        let parsed =
            PolicySet::from_str(text).map_err(|err| LayerError::Syntax(err.to_string()))?;
        if parsed.num_of_templates() > 0 {
            return Err(LayerError::Syntax(
                "policy templates (with ?principal or ?resource) are not supported".to_owned(),
            ));
        }
        let mut policies: Vec<&Policy> = parsed.policies().collect();
        policies.sort_by_key(|policy| place(policy.id()));
        let mut set = PolicySet::new();
        let mut rules = HashMap::new();
        for policy in policies {
            let name = match policy.annotation("id") {
                Some("") => {
                    return Err(LayerError::Syntax(format!(
                        "policy {} has an empty @id",
                        policy.id()
                    )))
                }
                Some(id) => id.to_owned(),
                None => policy.id().to_string(),
            };
            let id = PolicyId::new(&name);
            if rules.contains_key(&id) {
                return Err(LayerError::Syntax(format!(
                    "two policies have the id {name:?}"
                )));
            }
            let rule = rule_of(policy, name)?;
            set.add(policy.new_id(id.clone()))
                .map_err(|err| LayerError::Syntax(err.to_string()))?;
            rules.insert(id, rule);
        }
        let (generic, by_tool) = index_by_tool(&set)?;
        Ok(Self {
            set,
            rules,
            generic,
            by_tool,
        })
    }

    /// The policies that can match a call of `tool`: a call's action is
    /// its tool, so a policy scoped to other actions never matches it.
    pub(super) fn for_tool(&self, tool: &str) -> &PolicySet {
        self.by_tool.get(tool).unwrap_or(&self.generic)
    }

    /// Whether the layer holds no policy (it then has no say).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// How many policies the layer holds.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Checks the layer against `schema` with Cedar's strict validator, and
    /// that every tool named as a resource is one of the schema's: the
    /// validator's messages, joined, when it fails.
    pub fn validate(&self, schema: &Schema) -> Result<(), LayerError> {
        let result = Validator::new(schema.clone()).validate(&self.set, ValidationMode::Strict);
        let mut problems: Vec<String> = result
            .validation_errors()
            .map(ToString::to_string)
            .collect();
        let tools: Vec<&str> = schema
            .actions()
            .map(|action| action.id().unescaped())
            .collect();
        for policy in self.set.policies() {
            if let ResourceConstraint::Eq(uid) | ResourceConstraint::In(uid) =
                policy.resource_constraint()
            {
                let named = uid.id().unescaped();
                if !tools.contains(&named) {
                    problems.push(format!(
                        "for policy `{}`, unrecognized tool `{uid}`: the account has no tool named {named:?}",
                        policy.id()
                    ));
                }
            }
        }
        match problems.is_empty() {
            true => Ok(()),
            false => {
                problems.sort();
                Err(LayerError::Invalid(problems.join("; ")))
            }
        }
    }
}

/// The layer's policies indexed by the tool their action scope names
/// (see [`Layer::for_tool`]): the generic set, and one set per named tool.
fn index_by_tool(set: &PolicySet) -> Result<(PolicySet, HashMap<String, PolicySet>), LayerError> {
    let syntax = |err: cedar_policy::PolicySetError| LayerError::Syntax(err.to_string());
    let mut generic = PolicySet::new();
    let mut named: HashMap<String, Vec<Policy>> = HashMap::new();
    for policy in set.policies() {
        match policy.action_constraint() {
            ActionConstraint::Any => generic.add(policy.clone()).map_err(syntax)?,
            ActionConstraint::Eq(uid) => named
                .entry(uid.id().unescaped().to_owned())
                .or_default()
                .push(policy.clone()),
            ActionConstraint::In(uids) => {
                for uid in uids {
                    named
                        .entry(uid.id().unescaped().to_owned())
                        .or_default()
                        .push(policy.clone());
                }
            }
        }
    }
    let mut by_tool = HashMap::with_capacity(named.len());
    for (tool, policies) in named {
        let mut tool_set = generic.clone();
        for policy in policies {
            if tool_set.policy(policy.id()).is_none() {
                tool_set.add(policy).map_err(syntax)?;
            }
        }
        by_tool.insert(tool, tool_set);
    }
    Ok((generic, by_tool))
}

/// A policy's place in its text, from the id Cedar gave it (`policy<n>`).
fn place(id: &PolicyId) -> usize {
    id.to_string()
        .strip_prefix("policy")
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

/// What `policy` decides, its annotations checked.
fn rule_of(policy: &Policy, name: String) -> Result<Rule, LayerError> {
    let forbid = policy.effect() == Effect::Forbid;
    let decision = policy.annotation("decision");
    let (ask, allow_all) = match (decision, forbid) {
        (None, _) => (false, false),
        (Some("ask"), false) => (true, false),
        (Some("allow"), false) => (false, true),
        (Some(_), true) => {
            return Err(LayerError::Syntax(format!(
                "policy {name:?}: @decision belongs on a permit; a forbid always denies"
            )))
        }
        (Some(other), false) => {
            return Err(LayerError::Syntax(format!(
                "policy {name:?}: @decision({other:?}) must be \"ask\" or \"allow\""
            )))
        }
    };
    let approvers: Vec<String> = policy
        .annotation("approvers")
        .map(|list| {
            list.split([',', ' '])
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if !approvers.is_empty() && !ask {
        return Err(LayerError::Syntax(format!(
            "policy {name:?}: @approvers belongs on a permit that asks (@decision(\"ask\"))"
        )));
    }
    let mut names = Vec::new();
    let mut add = |uid: &EntityUid| names.push(uid.id().unescaped().to_owned());
    match policy.action_constraint() {
        ActionConstraint::Eq(uid) => add(&uid),
        ActionConstraint::In(uids) => uids.iter().for_each(&mut add),
        ActionConstraint::Any => {}
    }
    if let ResourceConstraint::Eq(uid) = policy.resource_constraint() {
        add(&uid);
    }
    Ok(Rule {
        name,
        forbid,
        ask,
        allow_all,
        names,
        approvers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_are_named_by_their_id_or_their_place() {
        let layer = Layer::parse(
            r#"permit(principal, action, resource);
               @id("no-refunds") forbid(principal, action == Action::"refund", resource);"#,
        )
        .unwrap();
        let mut names: Vec<&str> = layer.rules.values().map(|r| r.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["no-refunds", "policy0"]);
        let refunds = &layer.rules[&PolicyId::new("no-refunds")];
        assert!(refunds.forbid && refunds.explicit_about("refund"));
    }

    #[test]
    fn a_tool_is_judged_by_the_policies_naming_it_and_the_generic_ones() {
        let layer = Layer::parse(
            r#"@id("any") permit(principal, action, resource);
               @id("pair") forbid(principal, action in [Action::"a", Action::"b"], resource);
               @id("only-a") permit(principal, action == Action::"a", resource);"#,
        )
        .unwrap();
        let ids = |tool: &str| {
            let mut ids: Vec<String> = layer
                .for_tool(tool)
                .policies()
                .map(|p| p.id().to_string())
                .collect();
            ids.sort();
            ids
        };
        assert_eq!(ids("a"), ["any", "only-a", "pair"]);
        assert_eq!(ids("b"), ["any", "pair"]);
        assert_eq!(ids("c"), ["any"]);
    }

    #[test]
    fn bad_annotations_and_templates_are_refused() {
        for (text, says) in [
            (
                r#"@decision("ask") forbid(principal, action, resource);"#,
                "belongs on a permit",
            ),
            (
                r#"@decision("maybe") permit(principal, action, resource);"#,
                "must be \"ask\" or \"allow\"",
            ),
            (
                r#"@id("a") permit(principal, action, resource); @id("a") permit(principal, action, resource);"#,
                "two policies have the id",
            ),
            (
                "permit(principal == ?principal, action, resource);",
                "templates",
            ),
            (
                r#"@approvers("ann") permit(principal, action, resource);"#,
                "@approvers belongs on a permit that asks",
            ),
            (
                "permit(principal, action, resource",
                "unexpected end of input",
            ),
        ] {
            let err = Layer::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
