//! JSON Schema 2020-12 identifiers: the `$id` and `$anchor` of every schema
//! in the document, so that a `$ref` naming one (rather than a `#/...`
//! pointer) resolves to where that schema sits in the document.

use std::collections::HashMap;

use serde_json::{Map, Value};
use url::Url;

use crate::keywords::{escape, subschemas};
use crate::refs::percent_decode;

/// Keywords that name a location inside a schema resource.
const ANCHORS: [&str; 2] = ["$anchor", "$dynamicAnchor"];

/// Where every schema resource (`$id`) and anchor (`$anchor`,
/// `$dynamicAnchor`) of one document is, as JSON pointers into it.
#[derive(Debug)]
pub(crate) struct Ids {
    /// Whether schemas' `$id`s count: not in OpenAPI 3.0, whose schemas have
    /// no such keyword.
    honor_ids: bool,
    /// The document's own base URI.
    base: Url,
    /// Resource URI (no fragment) to the pointer of its schema; the
    /// document's base names the document itself (`""`).
    resources: HashMap<Url, String>,
    /// The pointer of every resource to its URI, for base URI lookups.
    bases: HashMap<String, Url>,
    /// (Resource URI, anchor name) to the pointer of the anchored schema.
    anchors: HashMap<(Url, String), String>,
}

impl Ids {
    /// The identifiers of `document`, whose base URI is `base`; `legacy`
    /// (OpenAPI 3.0) indexes none but the document itself.
    pub(crate) fn new(document: &Value, legacy: bool, base: Url) -> Self {
        let mut ids = Self {
            honor_ids: !legacy,
            base: without_fragment(base),
            resources: HashMap::new(),
            bases: HashMap::new(),
            anchors: HashMap::new(),
        };
        ids.resources.insert(ids.base.clone(), String::new());
        ids.bases.insert(String::new(), ids.base.clone());
        if ids.honor_ids {
            let base = ids.base.clone();
            ids.walk_document(document, "", &base);
        }
        ids
    }

    /// The document's base URI.
    pub(crate) fn document_base(&self) -> &Url {
        &self.base
    }

    /// The base URI in effect at the schema at `pointer`, before any `$id`
    /// of its own: the URI of the nearest resource that encloses it.
    pub(crate) fn base_of(&self, pointer: &str) -> &Url {
        pointer
            .rmatch_indices('/')
            .find_map(|(end, _)| self.bases.get(&pointer[..end]))
            .unwrap_or(&self.base)
    }

    /// The base URI inside `schema` when it declares a `$id`, resolved
    /// against `base`, the base URI around it.
    pub(crate) fn scope(&self, base: &Url, schema: &Map<String, Value>) -> Option<Url> {
        if !self.honor_ids {
            return None;
        }
        let id = schema.get("$id")?.as_str()?;
        let resolved = base.join(id).ok()?;
        match resolved.fragment() {
            Some(fragment) if !fragment.is_empty() => None,
            _ => Some(without_fragment(resolved)),
        }
    }

    /// The JSON pointer into the document of what `reference` names, when
    /// it appears where `base` is the base URI; an error when it names
    /// something outside the document.
    pub(crate) fn resolve(&self, base: &Url, reference: &str) -> Result<String, String> {
        let target = base
            .join(reference)
            .map_err(|_| format!("$ref {reference:?} is not a valid URI reference"))?;
        let fragment = target.fragment().map(percent_decode);
        let resource = without_fragment(target);
        let Some(root) = self.resources.get(&resource) else {
            return Err(format!("external $ref {reference:?} is not supported"));
        };
        match fragment {
            None => Ok(root.clone()),
            Some(None) => Err(format!("$ref {reference:?} is not a valid JSON pointer")),
            Some(Some(fragment)) if fragment.is_empty() => Ok(root.clone()),
            Some(Some(pointer)) if pointer.starts_with('/') => Ok(format!("{root}{pointer}")),
            Some(Some(name)) => self
                .anchors
                .get(&(resource, name))
                .cloned()
                .ok_or_else(|| format!("$ref {reference:?} names no $anchor in the document")),
        }
    }

    /// Indexes the schemas of an OpenAPI document outside any schema: every
    /// `schema` field and every entry of `/components/schemas`. Examples and
    /// extensions hold data, not schemas, and are left out.
    fn walk_document(&mut self, value: &Value, pointer: &str, base: &Url) {
        match value {
            Value::Object(object) => {
                for (key, child) in object {
                    if key == "example" || key == "examples" || key.starts_with("x-") {
                        continue;
                    }
                    let at = format!("{pointer}/{}", escape(key));
                    if key == "schema" {
                        self.walk_schema(child, &at, base);
                    } else if at == "/components/schemas" {
                        for (name, schema) in child.as_object().into_iter().flatten() {
                            self.walk_schema(schema, &format!("{at}/{}", escape(name)), base);
                        }
                    } else {
                        self.walk_document(child, &at, base);
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.walk_document(item, &format!("{pointer}/{i}"), base);
                }
            }
            _ => {}
        }
    }

    /// Indexes the `$id` and anchors of `schema` and of its subschemas.
    fn walk_schema(&mut self, schema: &Value, pointer: &str, base: &Url) {
        let Value::Object(object) = schema else {
            return;
        };
        let scope = self.scope(base, object);
        if let Some(uri) = &scope {
            self.resources
                .entry(uri.clone())
                .or_insert_with(|| pointer.to_owned());
            self.bases.insert(pointer.to_owned(), uri.clone());
        }
        let base = scope.as_ref().unwrap_or(base);
        for keyword in ANCHORS {
            if let Some(name) = object.get(keyword).and_then(Value::as_str) {
                self.anchors
                    .entry((base.clone(), name.to_owned()))
                    .or_insert_with(|| pointer.to_owned());
            }
        }
        for (at, subschema) in subschemas(object) {
            self.walk_schema(subschema, &format!("{pointer}{at}"), base);
        }
    }
}

fn without_fragment(mut url: Url) -> Url {
    url.set_fragment(None);
    url
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn document() -> Value {
        json!({
            "openapi": "3.1.0",
            "paths": {"/a": {"post": {"requestBody": {"content": {"application/json": {
                "schema": {"$id": "https://schemas.example.com/inline", "type": "string"},
            }}}}}},
            "components": {"schemas": {
                "Outer": {
                    "$id": "https://schemas.example.com/things/outer",
                    "properties": {
                        "inner": {"$ref": "inner"},
                        "named": {"$anchor": "name", "type": "string"},
                        "nested": {"$id": "nested/", "items": {"$anchor": "item"}},
                    },
                },
                "Inner": {"$id": "https://schemas.example.com/things/inner"},
                "Relative": {"$id": "/api/relative", "$dynamicAnchor": "meta"},
                "Top": {"$anchor": "top", "examples": [{"$id": "https://not.a/schema"}]},
            }},
            "x-data": {"schema": {"$id": "https://not.a/schema"}},
        })
    }

    fn ids(legacy: bool) -> Ids {
        let base = Url::parse("https://api.example.com/v1/openapi.json").unwrap();
        Ids::new(&document(), legacy, base)
    }

    fn resolve(ids: &Ids, base: &str, reference: &str) -> Result<String, String> {
        ids.resolve(&Url::parse(base).unwrap(), reference)
    }

    #[test]
    fn resolves_a_ref_to_an_id_by_exact_match() {
        let ids = ids(false);
        let doc = ids.document_base().as_str().to_owned();
        let outer = "/components/schemas/Outer";
        assert_eq!(
            resolve(&ids, &doc, "https://schemas.example.com/things/outer"),
            Ok(outer.into())
        );
        assert_eq!(
            resolve(&ids, &doc, "https://schemas.example.com/things/outer#"),
            Ok(outer.into())
        );
        assert_eq!(
            resolve(&ids, &doc, "https://schemas.example.com/inline"),
            Ok("/paths/~1a/post/requestBody/content/application~1json/schema".into())
        );
        assert_eq!(
            resolve(&ids, &doc, "/api/relative"),
            Ok("/components/schemas/Relative".into())
        );
        assert_eq!(
            resolve(&ids, &doc, "#/components/schemas/Top"),
            Ok("/components/schemas/Top".into())
        );
        assert_eq!(
            resolve(&ids, &doc, "openapi.json#/components/schemas/Top"),
            Ok("/components/schemas/Top".into())
        );
    }

    #[test]
    fn resolves_relative_refs_against_the_enclosing_id() {
        let ids = ids(false);
        let outer = "https://schemas.example.com/things/outer";
        assert_eq!(
            resolve(&ids, outer, "inner"),
            Ok("/components/schemas/Inner".into())
        );
        assert_eq!(
            resolve(&ids, outer, "#/properties/named"),
            Ok("/components/schemas/Outer/properties/named".into())
        );
        assert_eq!(
            resolve(&ids, outer, "outer#/properties/nested/items"),
            Ok("/components/schemas/Outer/properties/nested/items".into())
        );
        assert_eq!(
            resolve(&ids, outer, "nested/"),
            Ok("/components/schemas/Outer/properties/nested".into())
        );
        let inner = "/components/schemas/Outer/properties/inner";
        assert_eq!(ids.base_of(inner).as_str(), outer);
        assert_eq!(
            ids.base_of("/components/schemas/Outer"),
            ids.document_base()
        );
        assert_eq!(
            ids.base_of("/components/schemas/Outer/properties/nested/items")
                .as_str(),
            "https://schemas.example.com/things/nested/"
        );
    }

    #[test]
    fn resolves_plain_name_fragments_to_anchors_of_their_resource() {
        let ids = ids(false);
        let outer = "https://schemas.example.com/things/outer";
        let named = "/components/schemas/Outer/properties/named";
        assert_eq!(resolve(&ids, outer, "#name"), Ok(named.into()));
        assert_eq!(
            resolve(&ids, "https://schemas.example.com/", "things/outer#name"),
            Ok(named.into())
        );
        assert_eq!(
            resolve(&ids, outer, "nested/#item"),
            Ok("/components/schemas/Outer/properties/nested/items".into())
        );
        let doc = ids.document_base().as_str().to_owned();
        assert_eq!(
            resolve(&ids, &doc, "/api/relative#meta"),
            Ok("/components/schemas/Relative".into())
        );
        assert!(resolve(&ids, outer, "/api/relative#meta").is_err());
        assert_eq!(
            resolve(&ids, &doc, "#top"),
            Ok("/components/schemas/Top".into())
        );
        let err = resolve(&ids, &doc, "#name").unwrap_err();
        assert!(err.contains("names no $anchor"), "{err}");
        assert!(resolve(&ids, outer, "#item").is_err());
    }

    #[test]
    fn refuses_refs_outside_the_document() {
        let ids = ids(false);
        let doc = ids.document_base().as_str().to_owned();
        for reference in [
            "https://schemas.example.com/things/elsewhere",
            "other.json#/components/schemas/Top",
            "https://not.a/schema",
        ] {
            let err = resolve(&ids, &doc, reference).unwrap_err();
            assert_eq!(err, format!("external $ref {reference:?} is not supported"));
        }
        assert!(resolve(&ids, &doc, "#/a%zz").is_err());
    }

    #[test]
    fn openapi_3_0_schemas_have_no_ids() {
        let ids = ids(true);
        let doc = ids.document_base().as_str().to_owned();
        assert!(resolve(&ids, &doc, "https://schemas.example.com/things/outer").is_err());
        assert!(resolve(&ids, &doc, "#top").is_err());
        assert_eq!(
            resolve(&ids, &doc, "#/components/schemas/Outer"),
            Ok("/components/schemas/Outer".into())
        );
    }
}
