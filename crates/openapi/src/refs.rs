//! `$ref` handling: resolving references inside the document, and naming the
//! schemas an operation reaches so they can be copied into `$defs`.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// How many `$ref`s in a row [`inline`] follows before giving up.
const MAX_CHAIN: usize = 32;

/// The JSON pointer a local reference (`#/...`) names, percent-decoded;
/// an error naming any other (external) reference.
pub(crate) fn local_pointer(reference: &str) -> Result<String, String> {
    let Some(fragment) = reference.strip_prefix('#') else {
        return Err(format!("external $ref {reference:?} is not supported"));
    };
    let pointer = percent_decode(fragment)
        .ok_or_else(|| format!("$ref {reference:?} is not a valid JSON pointer"))?;
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(format!("$ref {reference:?} is not a JSON pointer"));
    }
    Ok(pointer)
}

/// The value a local reference points at.
pub(crate) fn target<'a>(document: &'a Value, reference: &str) -> Result<&'a Value, String> {
    let pointer = local_pointer(reference)?;
    document
        .pointer(&pointer)
        .ok_or_else(|| format!("$ref {reference:?} points at nothing in the document"))
}

/// `value` itself, or what its `$ref` (and any `$ref` that one holds) points
/// at: for parameters, request bodies, path items and security schemes,
/// which are inlined rather than kept as references.
pub(crate) fn inline<'a>(document: &'a Value, mut value: &'a Value) -> Result<&'a Value, String> {
    for _ in 0..MAX_CHAIN {
        match value.get("$ref").and_then(Value::as_str) {
            Some(reference) => value = target(document, reference)?,
            None => return Ok(value),
        }
    }
    Err(format!("more than {MAX_CHAIN} $refs in a row"))
}

/// The schemas one input schema reaches through `$ref`, each under a
/// unique `$defs` name.
#[derive(Debug, Default)]
pub(crate) struct Defs {
    names: HashMap<String, String>,
    taken: HashSet<String>,
    pending: Vec<String>,
}

impl Defs {
    /// The rewritten form (`#/$defs/<name>`) of `reference`, which names
    /// the schema at `pointer` in the document; a pointer seen for the first
    /// time is queued for [`Defs::next_pending`].
    pub(crate) fn reference(&mut self, reference: &str, pointer: String) -> Result<String, String> {
        if pointer.is_empty() {
            return Err(format!(
                "$ref {reference:?} names the whole document, not a schema"
            ));
        }
        if let Some(name) = self.names.get(&pointer) {
            return Ok(format!("#/$defs/{name}"));
        }
        let wanted = def_name(&pointer);
        let mut name = wanted.clone();
        let mut counter = 1;
        while self.taken.contains(&name) {
            counter += 1;
            name = format!("{wanted}_{counter}");
        }
        self.taken.insert(name.clone());
        self.names.insert(pointer.clone(), name.clone());
        self.pending.push(pointer);
        Ok(format!("#/$defs/{name}"))
    }

    /// A referenced pointer whose schema is not copied yet, with its name.
    pub(crate) fn next_pending(&mut self) -> Option<(String, String)> {
        let pointer = self.pending.pop()?;
        let name = self.names.get(&pointer)?.clone();
        Some((pointer, name))
    }
}

/// A `$defs` name for a pointer: the schema's component name for
/// `/components/schemas/X`, otherwise the pointer's segments joined by `_`,
/// limited to characters that need no escaping in a URI fragment.
fn def_name(pointer: &str) -> String {
    let segments: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    let segments = match segments.as_slice() {
        [components, schemas, rest @ ..]
            if components == "components" && schemas == "schemas" && !rest.is_empty() =>
        {
            rest
        }
        all => all,
    };
    let name: String = segments
        .join("_")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "schema".into()
    } else {
        name
    }
}

/// `text` with its `%XX` escapes decoded; `None` when one is malformed or
/// the result is not UTF-8.
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn resolves_local_pointers_and_refuses_external_ones() {
        let doc = json!({"paths": {"/a{b}": {"x": 1}}, "components": {"parameters": {
            "P": {"$ref": "#/components/parameters/Q"}, "Q": {"name": "q"}}}});
        assert_eq!(target(&doc, "#/paths/~1a%7Bb%7D/x"), Ok(&json!(1)));
        let p = json!({"$ref": "#/components/parameters/P"});
        assert_eq!(inline(&doc, &p), Ok(&json!({"name": "q"})));
        let external = local_pointer("other.yaml#/components/schemas/X").unwrap_err();
        assert!(external.contains("external $ref \"other.yaml#/components/schemas/X\""));
        assert!(target(&doc, "#/nothing").is_err());
        let looped = json!({"a": {"$ref": "#/a"}});
        assert!(inline(&looped, &looped["a"]).is_err());
    }

    #[test]
    fn names_defs_uniquely() {
        let mut defs = Defs::default();
        let mut reference = |pointer: &str| defs.reference("r", pointer.into());
        assert_eq!(
            reference("/components/schemas/Pet"),
            Ok("#/$defs/Pet".into())
        );
        assert_eq!(
            reference("/components/schemas/Pet"),
            Ok("#/$defs/Pet".into())
        );
        assert_eq!(
            reference("/definitions/Pet"),
            Ok("#/$defs/definitions_Pet".into())
        );
        assert_eq!(reference("/x/Pet"), Ok("#/$defs/x_Pet".into()));
        assert_eq!(
            reference("/components/schemas/x~1Pet"),
            Ok("#/$defs/x_Pet_2".into())
        );
        assert_eq!(
            reference("/components/schemas/a b"),
            Ok("#/$defs/a_b".into())
        );
        assert!(reference("").is_err());
        let mut seen = Vec::new();
        while let Some((pointer, _)) = defs.next_pending() {
            seen.push(pointer);
        }
        assert_eq!(seen.len(), 5);
    }
}
