//! One call as Cedar sees it (principal, action, resource, context), and
//! one layer's decision on it, read from what matched (see the parent
//! module). A `forbid` that fails to evaluate (an argument it reads is
//! missing or of another type) denies: policies fail closed.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use cedar_policy::{
    Authorizer, Context, Decision as CedarDecision, Entities, Entity, EntityId, EntityTypeName,
    EntityUid, PolicyId, Request, RestrictedExpression,
};
use serde_json::Value;
use toolserver_domain::{CallPath, ToolEffects};

use super::layer::Layer;
use super::Decision;

/// Deepest nesting of an argument's arrays and objects that policies see.
const MAX_DEPTH: usize = 16;

static USER: LazyLock<Option<EntityTypeName>> = LazyLock::new(|| "User".parse().ok());
static ACTION: LazyLock<Option<EntityTypeName>> = LazyLock::new(|| "Action".parse().ok());
static TOOL: LazyLock<Option<EntityTypeName>> = LazyLock::new(|| "Tool".parse().ok());
static AUTHORIZER: LazyLock<Authorizer> = LazyLock::new(Authorizer::new);

/// Who calls which tool, where: everything Cedar judges but the input.
#[derive(Debug, Clone)]
pub struct CallFacts {
    /// The end user (the token's `sub`), if any.
    pub user: Option<String>,
    /// The tool's model-facing name.
    pub tool: String,
    /// The tool's effects (as narrowed by the agent config).
    pub effects: ToolEffects,
    /// The path of the call.
    pub path: CallPath,
    /// The turn's agent, inside a turn.
    pub agent: Option<String>,
    /// The turn's conversation, inside a turn.
    pub conversation: Option<String>,
}

/// A call ready to be judged by any number of layers.
pub(super) struct Prepared {
    request: Request,
    entities: Entities,
}

impl CallFacts {
    /// The Cedar request of this call with `input` (`None`: the input is
    /// unknown, for partial evaluation).
    pub(super) fn prepare(&self, input: Option<&Value>) -> Result<Prepared, String> {
        let (Some(user), Some(action), Some(tool)) = (&*USER, &*ACTION, &*TOOL) else {
            return Err("Cedar refused this server's entity type names".to_owned());
        };
        let uid = |kind: &EntityTypeName, id: &str| {
            EntityUid::from_type_name_and_id(kind.clone(), EntityId::new(id))
        };
        let principal = uid(user, self.user.as_deref().unwrap_or_default());
        let resource = uid(tool, &self.tool);
        let attrs = HashMap::from([
            (
                "name".to_owned(),
                RestrictedExpression::new_string(self.tool.clone()),
            ),
            (
                "effects".to_owned(),
                RestrictedExpression::new_string(self.effects.as_str().to_owned()),
            ),
        ]);
        let tool_entity =
            Entity::new(resource.clone(), attrs, HashSet::new()).map_err(|e| e.to_string())?;
        let entities =
            Entities::from_entities([tool_entity], None).map_err(|err| err.to_string())?;
        let input = match input {
            Some(Value::Object(_)) => input.and_then(|value| cedar_value(value, 0)),
            Some(_) => None,
            None => Some(RestrictedExpression::new_unknown("input")),
        };
        let input = match input {
            Some(input) => input,
            None => RestrictedExpression::new_record(std::iter::empty())
                .map_err(|err| err.to_string())?,
        };
        let turn = [("agent", &self.agent), ("conversation", &self.conversation)]
            .into_iter()
            .filter_map(|(key, value)| {
                let value = value.clone()?;
                Some((key.to_owned(), RestrictedExpression::new_string(value)))
            });
        let turn = RestrictedExpression::new_record(turn).map_err(|err| err.to_string())?;
        let path = RestrictedExpression::new_string(self.path.as_str().to_owned());
        let context = Context::from_pairs([
            ("input".to_owned(), input),
            ("turn".to_owned(), turn),
            ("path".to_owned(), path),
        ])
        .map_err(|err| err.to_string())?;
        let request = Request::new(principal, uid(action, &self.tool), resource, context, None)
            .map_err(|err| err.to_string())?;
        Ok(Prepared { request, entities })
    }
}

/// The argument `value` as a Cedar value: strings, booleans, whole numbers
/// (as `Long`), arrays (as sets) and objects (as records); whatever else
/// (null, fractions, numbers past a `Long`, nesting past [`MAX_DEPTH`]) is
/// left out, so a policy reading it fails to evaluate.
fn cedar_value(value: &Value, depth: usize) -> Option<RestrictedExpression> {
    match value {
        Value::String(text) => Some(RestrictedExpression::new_string(text.clone())),
        Value::Bool(flag) => Some(RestrictedExpression::new_bool(*flag)),
        Value::Number(number) => number.as_i64().map(RestrictedExpression::new_long),
        Value::Array(items) if depth < MAX_DEPTH => Some(RestrictedExpression::new_set(
            items.iter().filter_map(|item| cedar_value(item, depth + 1)),
        )),
        Value::Object(fields) if depth < MAX_DEPTH => RestrictedExpression::new_record(
            fields
                .iter()
                .filter_map(|(key, field)| Some((key.clone(), cedar_value(field, depth + 1)?))),
        )
        .ok(),
        _ => None,
    }
}

/// One layer's decision on a call.
#[derive(Debug, Clone)]
pub(super) struct LayerAnswer {
    pub(super) decision: Decision,
    /// The ids of the policies that decided, as `<layer>:<id>`.
    pub(super) policies: Vec<String>,
    pub(super) reason: String,
    /// Who may approve, when the layer asks (empty: anyone).
    pub(super) approvers: Vec<String>,
}

/// What `layer` (named `layer_name`) decides on `call`, for `facts`' tool.
pub(super) fn decide(
    layer: &Layer,
    layer_name: &str,
    facts: &CallFacts,
    call: &Prepared,
) -> LayerAnswer {
    let response =
        AUTHORIZER.is_authorized(&call.request, layer.for_tool(&facts.tool), &call.entities);
    let diagnostics = response.diagnostics();
    let name = |id: &PolicyId| {
        layer
            .rules
            .get(id)
            .map_or_else(|| id.to_string(), |rule| rule.name.clone())
    };
    let ids = |names: &[String]| -> Vec<String> {
        names.iter().map(|n| format!("{layer_name}:{n}")).collect()
    };
    let quoted = |names: &[String]| {
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let failed: Vec<(String, String)> = diagnostics
        .errors()
        .filter_map(|err| {
            let cedar_policy::AuthorizationError::PolicyEvaluationError(err) = err;
            let id = err.policy_id();
            let forbid = layer.rules.get(id).is_some_and(|rule| rule.forbid);
            forbid.then(|| (name(id), err.inner().to_string()))
        })
        .collect();
    let mut matched: Vec<&PolicyId> = diagnostics.reason().collect();
    matched.sort();
    if response.decision() == CedarDecision::Deny && !matched.is_empty() {
        let names: Vec<String> = matched.iter().map(|id| name(id)).collect();
        return LayerAnswer {
            decision: Decision::Deny,
            reason: format!("{layer_name} policy {} forbids it", quoted(&names)),
            policies: ids(&names),
            approvers: Vec::new(),
        };
    }
    if !failed.is_empty() {
        let names: Vec<String> = failed.iter().map(|(n, _)| n.clone()).collect();
        let errors: Vec<String> = failed.iter().map(|(_, e)| e.clone()).collect();
        return LayerAnswer {
            decision: Decision::Deny,
            reason: format!(
                "{layer_name} policy {} could not be evaluated on this call ({}), so it denies",
                quoted(&names),
                errors.join("; ")
            ),
            policies: ids(&names),
            approvers: Vec::new(),
        };
    }
    let rules: Vec<_> = matched
        .iter()
        .filter_map(|id| layer.rules.get(id))
        .collect();
    let asking: Vec<String> = rules
        .iter()
        .filter(|rule| rule.ask)
        .map(|rule| rule.name.clone())
        .collect();
    if !asking.is_empty() {
        let mut approvers: Vec<String> = rules
            .iter()
            .filter(|rule| rule.ask)
            .flat_map(|rule| rule.approvers.iter().cloned())
            .collect();
        approvers.sort();
        approvers.dedup();
        return LayerAnswer {
            decision: Decision::Ask,
            reason: format!(
                "{layer_name} policy {} asks for a person's approval",
                quoted(&asking)
            ),
            policies: ids(&asking),
            approvers,
        };
    }
    if rules.is_empty() {
        return LayerAnswer {
            decision: Decision::Deny,
            reason: format!("no {layer_name} policy allows it"),
            policies: Vec::new(),
            approvers: Vec::new(),
        };
    }
    let explicit: Vec<String> = rules
        .iter()
        .filter(|rule| rule.explicit_about(&facts.tool))
        .map(|rule| rule.name.clone())
        .collect();
    let all: Vec<String> = rules.iter().map(|rule| rule.name.clone()).collect();
    if facts.effects == ToolEffects::SideEffect && explicit.is_empty() {
        return LayerAnswer {
            decision: Decision::Ask,
            reason: format!(
                "{layer_name} policy {} allows it, but {} has side effects and no policy names it \
                 or says @decision(\"allow\"), so a person approves",
                quoted(&all),
                facts.tool
            ),
            policies: ids(&all),
            approvers: Vec::new(),
        };
    }
    let deciding = match explicit.is_empty() {
        true => all,
        false => explicit,
    };
    LayerAnswer {
        decision: Decision::Allow,
        reason: format!("{layer_name} policy {} allows it", quoted(&deciding)),
        policies: ids(&deciding),
        approvers: Vec::new(),
    }
}

/// Whether `layer` could let `facts`' tool run for some input: false when
/// a `forbid` holds whatever the input, or no `permit` can hold.
pub(super) fn could_run(layer: &Layer, facts: &CallFacts, call: &Prepared) -> bool {
    let response = AUTHORIZER.is_authorized_partial(
        &call.request,
        layer.for_tool(&facts.tool),
        &call.entities,
    );
    response.decision() != Some(CedarDecision::Deny)
}
