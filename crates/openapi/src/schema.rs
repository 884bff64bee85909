//! Rewrites a schema taken from the document into JSON Schema 2020-12 that
//! stands alone: OpenAPI 3.0 forms become their 2020-12 equivalents, every
//! `$ref` points into the input schema's own `$defs`, and patterns the
//! engine refuses are dropped.

use serde_json::{json, Map, Value};
use url::Url;

use crate::ids::Ids;
use crate::keywords::{SUBSCHEMA, SUBSCHEMA_LISTS, SUBSCHEMA_MAPS};
use crate::patterns::Patterns;
use crate::refs::Defs;

/// OpenAPI 3.0 schema keywords that are not JSON Schema and are dropped.
const OPENAPI_ONLY: [&str; 4] = ["example", "discriminator", "xml", "externalDocs"];
/// Keywords that identify a schema resource or describe its dialect; they
/// are dropped, since a copied schema is no resource of its own (a `$id`
/// left in `$defs` would change what the `#/$defs/...` refs in it mean) and
/// the input schema is 2020-12 throughout.
const RESOURCE_ONLY: [&str; 5] = ["$id", "$anchor", "$dynamicAnchor", "$schema", "$vocabulary"];

/// Converts the schemas of one operation, collecting what they reference.
pub(crate) struct Converter<'a> {
    document: &'a Value,
    legacy: bool,
    ids: &'a Ids,
    patterns: &'a mut Patterns,
    defs: Defs,
    /// The base URI `$ref`s resolve against where the conversion is.
    base: Url,
}

impl<'a> Converter<'a> {
    /// A converter for schemas of `document`, whose identifiers are `ids`;
    /// `legacy` for OpenAPI 3.0.
    pub(crate) fn new(
        document: &'a Value,
        legacy: bool,
        ids: &'a Ids,
        patterns: &'a mut Patterns,
    ) -> Self {
        Self {
            document,
            legacy,
            ids,
            patterns,
            defs: Defs::default(),
            base: ids.document_base().clone(),
        }
    }

    /// The 2020-12 form of `schema`, its references rewritten to `#/$defs/...`.
    pub(crate) fn convert(&mut self, schema: &Value) -> Result<Value, String> {
        match schema {
            Value::Object(object) => self.convert_object(object),
            other => Ok(other.clone()),
        }
    }

    /// The `$defs` every converted schema reaches, transitively.
    pub(crate) fn finish(mut self) -> Result<Map<String, Value>, String> {
        let mut defs = Map::new();
        while let Some((pointer, name)) = self.defs.next_pending() {
            let target = self
                .document
                .pointer(&pointer)
                .ok_or_else(|| format!("$ref \"#{pointer}\" points at nothing in the document"))?;
            self.base = self.ids.base_of(&pointer).clone();
            let converted = self.convert(target)?;
            defs.insert(name, converted);
        }
        Ok(defs)
    }

    /// Converts a schema object, within the scope of its `$id` if it has one.
    fn convert_object(&mut self, object: &Map<String, Value>) -> Result<Value, String> {
        let Some(inner) = self.ids.scope(&self.base, object) else {
            return self.convert_keywords(object);
        };
        let outer = std::mem::replace(&mut self.base, inner);
        let converted = self.convert_keywords(object);
        self.base = outer;
        converted
    }

    fn convert_keywords(&mut self, object: &Map<String, Value>) -> Result<Value, String> {
        let mut out = Map::new();
        for (key, value) in object {
            if RESOURCE_ONLY.contains(&key.as_str())
                || (self.legacy && (OPENAPI_ONLY.contains(&key.as_str()) || key.starts_with("x-")))
            {
                continue;
            }
            let converted = match key.as_str() {
                "$ref" | "$dynamicRef" => match value.as_str() {
                    Some(reference) => Value::String(self.reference(reference)?),
                    None => value.clone(),
                },
                "pattern" => match value.as_str() {
                    Some(pattern) if !self.patterns.accepts(pattern) => continue,
                    _ => value.clone(),
                },
                "items" if value.is_array() => {
                    out.insert("prefixItems".into(), self.convert_list(value)?);
                    continue;
                }
                k if SUBSCHEMA.contains(&k) => self.convert(value)?,
                k if SUBSCHEMA_LISTS.contains(&k) => self.convert_list(value)?,
                k if SUBSCHEMA_MAPS.contains(&k) => self.convert_map(key, value)?,
                _ => value.clone(),
            };
            out.insert(key.clone(), converted);
        }
        if self.legacy {
            exclusive_bounds(&mut out);
            return Ok(nullable(out));
        }
        Ok(Value::Object(out))
    }

    /// The `#/$defs/...` form of a reference found where the conversion is.
    fn reference(&mut self, reference: &str) -> Result<String, String> {
        let pointer = self.ids.resolve(&self.base, reference)?;
        self.defs.reference(reference, pointer)
    }

    fn convert_list(&mut self, value: &Value) -> Result<Value, String> {
        match value {
            Value::Array(items) => items
                .iter()
                .map(|item| self.convert(item))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            other => Ok(other.clone()),
        }
    }

    fn convert_map(&mut self, keyword: &str, value: &Value) -> Result<Value, String> {
        let Value::Object(entries) = value else {
            return Ok(value.clone());
        };
        let mut out = Map::new();
        for (name, schema) in entries {
            if keyword == "patternProperties" && !self.patterns.accepts(name) {
                continue;
            }
            out.insert(name.clone(), self.convert(schema)?);
        }
        Ok(Value::Object(out))
    }
}

/// OpenAPI 3.0's boolean `exclusiveMinimum`/`exclusiveMaximum` (which modify
/// `minimum`/`maximum`) as 2020-12's numeric bounds.
fn exclusive_bounds(schema: &mut Map<String, Value>) {
    for (exclusive, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        match schema.get(exclusive) {
            Some(Value::Bool(true)) => {
                schema.remove(exclusive);
                if let Some(limit) = schema.remove(bound) {
                    schema.insert(exclusive.into(), limit);
                }
            }
            Some(Value::Bool(false)) => {
                schema.remove(exclusive);
            }
            _ => {}
        }
    }
}

/// OpenAPI 3.0's `nullable: true` as `"null"` among the types (and the enum
/// values), or as `anyOf` with `{"type": "null"}` when no type is given.
fn nullable(mut schema: Map<String, Value>) -> Value {
    if schema.remove("nullable") != Some(Value::Bool(true)) {
        return Value::Object(schema);
    }
    if let Some(Value::Array(values)) = schema.get_mut("enum") {
        if !values.contains(&Value::Null) {
            values.push(Value::Null);
        }
    }
    let null_type = Value::from("null");
    match schema.get_mut("type") {
        Some(Value::String(name)) if name != "null" => {
            let only = Value::from(std::mem::take(name));
            schema.insert("type".into(), Value::Array(vec![only, null_type]));
        }
        Some(Value::Array(types)) if !types.contains(&null_type) => types.push(null_type),
        Some(_) => {}
        None => return json!({"anyOf": [schema, {"type": "null"}]}),
    }
    Value::Object(schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(document: &Value, legacy: bool) -> Ids {
        Ids::new(
            document,
            legacy,
            Url::parse("https://example.com/openapi.json").unwrap(),
        )
    }

    fn convert(document: &Value, legacy: bool, schema: &Value) -> (Value, Map<String, Value>) {
        let mut patterns = Patterns::default();
        let ids = ids(document, legacy);
        let mut converter = Converter::new(document, legacy, &ids, &mut patterns);
        let converted = converter.convert(schema).unwrap();
        (converted, converter.finish().unwrap())
    }

    #[test]
    fn rewrites_openapi_3_0_forms() {
        let schema = json!({
            "type": "object",
            "example": {"a": 1},
            "x-internal": true,
            "discriminator": {"propertyName": "kind"},
            "properties": {
                "example": {"type": "integer", "minimum": 0, "exclusiveMinimum": true,
                            "maximum": 9, "exclusiveMaximum": false, "nullable": true},
                "x-kind": {"type": "string", "enum": ["a", "b"], "nullable": true},
                "any": {"description": "anything", "nullable": true},
                "plain": {"type": "string", "nullable": false, "pattern": "(bad"},
            },
        });
        let (converted, defs) = convert(&json!({}), true, &schema);
        assert!(defs.is_empty());
        assert_eq!(
            converted,
            json!({
                "type": "object",
                "properties": {
                    "example": {"type": ["integer", "null"], "exclusiveMinimum": 0, "maximum": 9},
                    "x-kind": {"type": ["string", "null"], "enum": ["a", "b", null]},
                    "any": {"anyOf": [{"description": "anything"}, {"type": "null"}]},
                    "plain": {"type": "string"},
                },
            })
        );
    }

    #[test]
    fn leaves_3_1_schemas_alone_but_for_refs() {
        let schema = json!({"type": ["string", "null"], "example": "x", "exclusiveMinimum": 3});
        assert_eq!(convert(&json!({}), false, &schema).0, schema);
    }

    #[test]
    fn copies_recursive_refs_into_defs() {
        let document = json!({"components": {"schemas": {
            "Node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}},
                "leaf": {"$ref": "#/components/schemas/Leaf"},
            }},
            "Leaf": {"type": "string"},
            "Unused": {"type": "string"},
        }}});
        let (converted, defs) = convert(
            &document,
            true,
            &json!({"$ref": "#/components/schemas/Node"}),
        );
        assert_eq!(converted, json!({"$ref": "#/$defs/Node"}));
        assert_eq!(defs.len(), 2);
        assert_eq!(
            defs["Node"]["properties"]["children"]["items"],
            json!({"$ref": "#/$defs/Node"})
        );
        assert_eq!(defs["Leaf"], json!({"type": "string"}));
    }

    #[test]
    fn refuses_external_refs() {
        let mut patterns = Patterns::default();
        let document = json!({});
        let ids = ids(&document, false);
        let mut converter = Converter::new(&document, false, &ids, &mut patterns);
        let err = converter
            .convert(&json!({"items": {"$ref": "https://example.com/pet.json"}}))
            .unwrap_err();
        assert!(
            err.contains("external $ref \"https://example.com/pet.json\""),
            "{err}"
        );
    }
}
