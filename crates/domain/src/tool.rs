//! Uploaded tool manifests: the model-facing name, description, input schema
//! and default configuration, each parsed once and valid by construction.

use serde_json::{Map, Value};

use crate::prefixed_id::prefixed_id;
use crate::validation::{abbreviate, refuse_nul, refuse_nul_text};
use crate::ValidationError;

/// Limits applied to uploaded tools; every one is configurable by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// Largest accepted bundle, in bytes (inclusive).
    pub max_bundle_bytes: usize,
    /// Longest accepted description, in characters.
    pub max_description_chars: usize,
    /// Largest accepted `inputSchema`, in bytes of compact JSON.
    pub max_schema_bytes: usize,
    /// Largest accepted `defaultConfig`, in bytes of compact JSON.
    pub max_config_bytes: usize,
    /// Longest value of one account secret, in characters.
    pub max_secret_chars: usize,
    /// Most secrets one account may keep.
    pub max_secrets: usize,
    /// Largest OpenAPI document an import fetches, in bytes.
    pub max_import_bytes: usize,
}

impl ToolLimits {
    /// The settings' defaults.
    pub const DEFAULT: Self = Self {
        max_bundle_bytes: 1_048_576,
        max_description_chars: 4096,
        max_schema_bytes: 65_536,
        max_config_bytes: 65_536,
        max_secret_chars: 8192,
        max_secrets: 200,
        max_import_bytes: 8 * 1024 * 1024,
    };
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

prefixed_id!(
    /// A stable tool identifier, shown as `tool_` followed by 32 hex characters.
    ToolId,
    "tool_"
);

/// The model-facing tool name: 1 to 64 letters, digits, `_` or `-`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolName(String);

impl ToolName {
    /// Parses a name under the rules model providers accept for function names.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        let ok = (1..=64).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(ValidationError::new(
                "name",
                "must be 1-64 characters of letters, digits, '_' or '-'",
            ))
        }
    }

    /// The name as shown to models.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The model-facing description of a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDescription(String);

impl ToolDescription {
    /// Parses a description: not blank, at most `limits.max_description_chars` characters.
    pub fn parse(raw: &str, limits: &ToolLimits) -> Result<Self, ValidationError> {
        if raw.trim().is_empty() {
            return Err(ValidationError::new("description", "must not be empty"));
        }
        refuse_nul_text("description", raw)?;
        let chars = raw.chars().count();
        if chars > limits.max_description_chars {
            return Err(ValidationError::new(
                "description",
                format!(
                    "is {chars} characters; the limit is {}",
                    limits.max_description_chars
                ),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The description text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A JSON Schema for tool input that compiles and describes an object.
///
/// A schema is checked against the meta-schema of its dialect (`$schema`;
/// 2020-12 by default) in every subschema, then compiled (its regexes and
/// `$ref`s must resolve); a refusal names where in the schema it is.
#[derive(Debug, Clone, PartialEq)]
pub struct InputSchema(Value);

impl InputSchema {
    /// Parses a schema: a JSON object with `"type": "object"` that compiles as JSON Schema.
    pub fn parse(value: Value, limits: &ToolLimits) -> Result<Self, ValidationError> {
        const FIELD: &str = "inputSchema";
        check_size(FIELD, &value, limits.max_schema_bytes)?;
        refuse_nul(FIELD, &value)?;
        let Some(object) = value.as_object() else {
            return Err(ValidationError::new(FIELD, "must be a JSON object"));
        };
        if object.get("type") != Some(&Value::String("object".into())) {
            return Err(ValidationError::new(
                FIELD,
                "must have \"type\": \"object\" at the top level",
            ));
        }
        if let Some(uri) = object.get("$schema").and_then(Value::as_str) {
            if jsonschema::Draft::from_schema_uri(uri) == jsonschema::Draft::Unknown {
                return Err(ValidationError::new(
                    FIELD,
                    format!(
                        "is not a valid JSON Schema: at /$schema: {} names no JSON Schema draft this server knows (draft 4, 6 or 7, 2019-09, 2020-12)",
                        abbreviate(&Value::from(uri).to_string(), MAX_VIOLATION_BYTES)
                    ),
                ));
            }
        }
        jsonschema::validator_for(&value).map_err(|err| {
            let path = err.instance_path().to_string();
            let at = if path.is_empty() { "/".into() } else { path };
            ValidationError::new(
                FIELD,
                abbreviate(
                    &format!("is not a valid JSON Schema: at {at}: {err}"),
                    MAX_VIOLATION_BYTES,
                ),
            )
        })?;
        Ok(Self(value))
    }

    /// Wraps a schema that was validated before it was stored.
    pub fn from_stored(value: Value) -> Self {
        Self(value)
    }

    /// The schema document.
    pub fn as_value(&self) -> &Value {
        &self.0
    }

    /// Compiles the schema, for checking inputs with [`violations`].
    pub fn compile(&self) -> Result<jsonschema::Validator, String> {
        jsonschema::validator_for(&self.0)
            .map_err(|err| format!("stored schema no longer compiles: {err}"))
    }
}

/// Longest description of one violation, in bytes: the violating value is
/// quoted in it, and is cut rather than echoed whole.
const MAX_VIOLATION_BYTES: usize = 300;

/// Every way `input` violates a compiled schema, each as `<json pointer>: <problem>`.
pub fn violations(validator: &jsonschema::Validator, input: &Value) -> Result<(), Vec<String>> {
    let errors: Vec<String> = validator
        .iter_errors(input)
        .map(|err| {
            let path = err.instance_path().to_string();
            let at = if path.is_empty() { "/".into() } else { path };
            abbreviate(&format!("{at}: {err}"), MAX_VIOLATION_BYTES)
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// A tool's configuration object (`defaultConfig`, or options merged over it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolConfig(Map<String, Value>);

impl ToolConfig {
    /// Parses a configuration: it must be a JSON object within the size limit.
    pub fn parse(value: Value, limits: &ToolLimits) -> Result<Self, ValidationError> {
        const FIELD: &str = "defaultConfig";
        check_size(FIELD, &value, limits.max_config_bytes)?;
        refuse_nul(FIELD, &value)?;
        match value {
            Value::Object(map) => Ok(Self(map)),
            _ => Err(ValidationError::new(FIELD, "must be a JSON object")),
        }
    }

    /// Wraps a configuration that was validated before it was stored.
    pub fn from_stored(map: Map<String, Value>) -> Self {
        Self(map)
    }

    /// The configuration as a JSON value.
    pub fn to_value(&self) -> Value {
        Value::Object(self.0.clone())
    }

    /// The configuration's keys and values.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    /// This configuration with `overrides` applied key by key on top.
    pub fn merged_with(&self, overrides: &Map<String, Value>) -> Self {
        let mut merged = self.0.clone();
        for (key, value) in overrides {
            merged.insert(key.clone(), value.clone());
        }
        Self(merged)
    }
}

fn check_size(field: &str, value: &Value, max: usize) -> Result<(), ValidationError> {
    let size = serde_json::to_vec(value)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > max {
        return Err(ValidationError::new(
            field,
            format!("is {size} bytes of JSON; the limit is {max}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tool_ids_round_trip_and_reject_foreign_forms() {
        let id = ToolId::generate();
        assert_eq!(ToolId::parse(&id.to_string()), Some(id));
        let plain = id.as_uuid().to_string();
        for bad in ["", "tool_", "tool_xyz", plain.as_str(), "agent_0123"] {
            assert_eq!(ToolId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn names_follow_function_name_rules() {
        for ok in ["a", "my_tool", "Tool-2", &"x".repeat(64)] {
            assert!(ToolName::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "has space", "dot.name", "ünï", &"x".repeat(65)] {
            let err = ToolName::parse(bad).unwrap_err();
            assert_eq!(err.field, "name");
        }
    }

    #[test]
    fn schemas_must_be_compilable_objects() {
        let limits = ToolLimits::default();
        let good = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        assert!(InputSchema::parse(good, &limits).is_ok());
        let cases = [
            json!([]),
            json!({"type": "string"}),
            json!({"properties": {}}),
            json!({"type": "object", "properties": {"q": {"type": "nonsense"}}}),
            json!({"type": "object", "minProperties": -1}),
        ];
        for bad in cases {
            let err = InputSchema::parse(bad.clone(), &limits).unwrap_err();
            assert_eq!(err.field, "inputSchema", "{bad}");
        }
    }

    #[test]
    fn every_subschema_is_checked_against_the_meta_schema() {
        let limits = ToolLimits::default();
        let nested = |inner: Value| json!({"type": "object", "allOf": [{"allOf": [inner]}]});
        for (bad, at) in [
            (
                nested(json!({"properties": []})),
                "/allOf/0/allOf/0/properties",
            ),
            (
                nested(json!({"required": "q"})),
                "/allOf/0/allOf/0/required",
            ),
            (
                nested(json!({"minLength": -1})),
                "/allOf/0/allOf/0/minLength",
            ),
            (
                json!({"type": "object", "properties": {"q": {"anyOf": [{"items": 3}]}}}),
                "/properties/q/anyOf/0/items",
            ),
            (
                json!({"type": "object", "$defs": {"d": {"type": "thing"}}}),
                "/$defs/d/type",
            ),
        ] {
            let err = InputSchema::parse(bad.clone(), &limits).unwrap_err();
            assert_eq!(err.field, "inputSchema", "{bad}");
            assert!(err.message.contains(at), "{bad}: {}", err.message);
        }
    }

    #[test]
    fn schema_check_reports_each_violation() {
        let schema = InputSchema::parse(
            json!({"type": "object", "required": ["q"], "properties": {"n": {"type": "integer"}}}),
            &ToolLimits::default(),
        )
        .unwrap();
        let validator = schema.compile().unwrap();
        assert!(violations(&validator, &json!({"q": "x", "n": 1})).is_ok());
        let errors = violations(&validator, &json!({"n": "one"})).unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
    }

    #[test]
    fn config_merges_over_defaults() {
        let base = ToolConfig::parse(json!({"a": 1, "b": 2}), &ToolLimits::default()).unwrap();
        let over = json!({"b": 3, "c": 4});
        let merged = base.merged_with(over.as_object().unwrap());
        assert_eq!(merged.to_value(), json!({"a": 1, "b": 3, "c": 4}));
        assert!(ToolConfig::parse(json!("x"), &ToolLimits::default()).is_err());
    }

    #[test]
    fn descriptions_are_bounded() {
        let limits = ToolLimits {
            max_description_chars: 5,
            ..ToolLimits::default()
        };
        assert!(ToolDescription::parse("hello", &limits).is_ok());
        assert!(ToolDescription::parse("hello!", &limits).is_err());
        assert!(ToolDescription::parse("   ", &limits).is_err());
    }
}
