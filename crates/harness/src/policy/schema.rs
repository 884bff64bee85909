//! The Cedar schema of an account's tools, which policies are validated
//! against when they are saved: one action per tool, whose context types
//! `input` from the tool's `inputSchema`. Properties typed `string`,
//! `integer` or `number` (a Cedar `Long`), `boolean`, arrays of those, and
//! objects with `properties` are typed; anything else is left out, so a
//! policy naming it is refused. A property the schema does not require is
//! optional: a policy reads it after `context.input has <name>`.

use cedar_policy::Schema;
use serde_json::{json, Map, Value};

/// Deepest nesting of objects and arrays typed.
const MAX_DEPTH: usize = 8;

/// A tool as the schema knows it.
#[derive(Debug, Clone)]
pub struct SchemaTool {
    /// Model-facing name (the action's id).
    pub name: String,
    /// Its JSON Schema input.
    pub input_schema: Value,
}

/// The Cedar schema of `tools`; a schema Cedar refuses (which these types
/// cannot make) is an error naming Cedar's reason.
pub fn account_schema(tools: &[SchemaTool]) -> Result<Schema, String> {
    let mut actions = Map::new();
    for tool in tools {
        let input = record_type(&tool.input_schema, 0).unwrap_or_else(empty_record);
        actions.insert(
            tool.name.clone(),
            json!({
                "appliesTo": {
                    "principalTypes": ["User"],
                    "resourceTypes": ["Tool"],
                    "context": {
                        "type": "Record",
                        "attributes": {
                            "input": input,
                            "turn": {"type": "Turn"},
                            "path": {"type": "String"},
                        },
                    },
                },
            }),
        );
    }
    let document = json!({
        "": {
            "commonTypes": {
                "Turn": {
                    "type": "Record",
                    "attributes": {
                        "agent": {"type": "String", "required": false},
                        "conversation": {"type": "String", "required": false},
                    },
                },
            },
            "entityTypes": {
                "User": {},
                "Tool": {
                    "shape": {
                        "type": "Record",
                        "attributes": {
                            "name": {"type": "String"},
                            "effects": {"type": "String"},
                        },
                    },
                },
            },
            "actions": actions,
        }
    });
    Schema::from_json_value(document).map_err(|err| err.to_string())
}

fn empty_record() -> Value {
    json!({"type": "Record", "attributes": {}})
}

/// The Cedar record type of a JSON Schema object, if it declares
/// properties.
fn record_type(schema: &Value, depth: usize) -> Option<Value> {
    let properties = schema.get("properties")?.as_object()?;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut attributes = Map::new();
    for (name, property) in properties {
        let Some(mut typed) = value_type(property, depth + 1) else {
            continue;
        };
        if !required.contains(&name.as_str()) {
            typed["required"] = Value::Bool(false);
        }
        attributes.insert(name.clone(), typed);
    }
    Some(json!({"type": "Record", "attributes": attributes}))
}

/// The Cedar type of one JSON Schema property, if it has one.
fn value_type(schema: &Value, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    match schema.get("type")?.as_str()? {
        "string" => Some(json!({"type": "String"})),
        "integer" | "number" => Some(json!({"type": "Long"})),
        "boolean" => Some(json!({"type": "Boolean"})),
        "array" => {
            let element = value_type(schema.get("items")?, depth + 1)?;
            Some(json!({"type": "Set", "element": element}))
        }
        "object" => record_type(schema, depth),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_properties_become_typed_attributes() {
        let schema = json!({
            "type": "object",
            "properties": {
                "amount": {"type": "integer"},
                "note": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "card": {"type": "object", "properties": {"last4": {"type": "string"}}, "required": ["last4"]},
                "any": {},
            },
            "required": ["amount"],
        });
        let typed = record_type(&schema, 0).unwrap();
        assert_eq!(
            typed,
            json!({"type": "Record", "attributes": {
                "amount": {"type": "Long"},
                "note": {"type": "String", "required": false},
                "tags": {"type": "Set", "element": {"type": "String"}, "required": false},
                "card": {"type": "Record", "attributes": {"last4": {"type": "String"}}, "required": false},
            }})
        );
        let tools = [SchemaTool {
            name: "refund".into(),
            input_schema: schema,
        }];
        assert!(account_schema(&tools).is_ok());
    }
}
