//! Which schema keywords hold subschemas, and where those subschemas sit.

use serde_json::{Map, Value};

/// Keywords whose value is one subschema (`items` may also be a list).
pub(crate) const SUBSCHEMA: [&str; 12] = [
    "items",
    "additionalProperties",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "additionalItems",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas.
pub(crate) const SUBSCHEMA_LISTS: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];
/// Keywords whose value maps names to subschemas.
pub(crate) const SUBSCHEMA_MAPS: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// The direct subschemas of a schema object, each with its JSON pointer
/// relative to the schema.
pub(crate) fn subschemas(schema: &Map<String, Value>) -> Vec<(String, &Value)> {
    let mut found = Vec::new();
    for (key, value) in schema {
        let at = format!("/{}", escape(key));
        let keyword = key.as_str();
        match value {
            Value::Array(items)
                if SUBSCHEMA_LISTS.contains(&keyword) || SUBSCHEMA.contains(&keyword) =>
            {
                found.extend(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| (format!("{at}/{i}"), item)),
                );
            }
            Value::Object(entries) if SUBSCHEMA_MAPS.contains(&keyword) => {
                found.extend(
                    entries
                        .iter()
                        .map(|(name, item)| (format!("{at}/{}", escape(name)), item)),
                );
            }
            _ if SUBSCHEMA.contains(&keyword) => found.push((at, value)),
            _ => {}
        }
    }
    found
}

/// `segment` escaped for use in a JSON pointer.
pub(crate) fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn finds_subschemas_with_their_pointers() {
        let schema = json!({
            "type": "object",
            "items": [{"type": "string"}],
            "not": {"type": "null"},
            "anyOf": [true],
            "properties": {"a/b": {"type": "integer"}},
            "enum": [{"type": "string"}],
            "const": {"items": {}},
        });
        let mut found = subschemas(schema.as_object().unwrap());
        found.sort_by(|a, b| a.0.cmp(&b.0));
        let pointers: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            pointers,
            ["/anyOf/0", "/items/0", "/not", "/properties/a~1b"]
        );
        assert_eq!(escape("~x/y"), "~0x~1y");
    }
}
