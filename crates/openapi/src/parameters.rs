//! An operation's parameters: path-item and operation parameters merged,
//! references inlined, and the ones a tool cannot send left out.

use serde_json::Value;

use crate::refs;

/// Where a parameter goes in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Location {
    /// A `{name}` in the path.
    Path,
    /// A query parameter.
    Query,
    /// A request header.
    Header,
}

/// One parameter the tool sends.
#[derive(Debug, PartialEq)]
pub(crate) struct Parameter<'a> {
    /// The wire name.
    pub name: String,
    /// Where it goes.
    pub location: Location,
    /// Whether the caller must give it (always for path parameters).
    pub required: bool,
    /// Its description, if any.
    pub description: Option<&'a str>,
    /// Its schema (from `schema` or the first `content` entry), if any.
    pub schema: Option<&'a Value>,
}

/// Header parameters OpenAPI says to ignore: the request's media types and
/// authentication are set elsewhere.
const IGNORED_HEADERS: [&str; 3] = ["accept", "content-type", "authorization"];

/// The parameters of an operation, operation-level ones overriding path-item
/// ones of the same name and location, plus a string parameter for every
/// `{name}` of the path that none declares. Optional cookie parameters are
/// left out; a required one is an error.
pub(crate) fn collect<'a>(
    document: &'a Value,
    item: &'a Value,
    operation: &'a Value,
    path: &str,
) -> Result<Vec<Parameter<'a>>, String> {
    let mut merged: Vec<Parameter<'a>> = Vec::new();
    let declared = [item, operation]
        .into_iter()
        .filter_map(|level| level.get("parameters")?.as_array())
        .flatten();
    for raw in declared {
        let Some(parameter) = parse(document, raw)? else {
            continue;
        };
        merged.retain(|p| !(p.name == parameter.name && p.location == parameter.location));
        merged.push(parameter);
    }
    for name in path_variables(path) {
        let declared = merged
            .iter()
            .any(|p| p.location == Location::Path && p.name == name);
        if !declared {
            merged.push(Parameter {
                name: name.to_owned(),
                location: Location::Path,
                required: true,
                description: None,
                schema: None,
            });
        }
    }
    Ok(merged)
}

fn parse<'a>(document: &'a Value, raw: &'a Value) -> Result<Option<Parameter<'a>>, String> {
    let parameter = refs::inline(document, raw).map_err(|err| format!("parameter: {err}"))?;
    let name = parameter
        .get("name")
        .and_then(Value::as_str)
        .ok_or("a parameter has no name")?;
    let required = parameter.get("required") == Some(&Value::Bool(true));
    let location = match parameter.get("in").and_then(Value::as_str) {
        Some("path") => Location::Path,
        Some("query") => Location::Query,
        Some("header") if IGNORED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) => {
            return Ok(None)
        }
        Some("header") => Location::Header,
        Some("cookie") if required => {
            return Err(format!(
                "required cookie parameter {name:?} is not supported"
            ))
        }
        Some("cookie") => return Ok(None),
        other => {
            return Err(format!(
                "parameter {name:?} has an unknown location {other:?}"
            ))
        }
    };
    let schema = parameter.get("schema").or_else(|| {
        parameter
            .get("content")?
            .as_object()?
            .values()
            .next()?
            .get("schema")
    });
    Ok(Some(Parameter {
        name: name.to_owned(),
        location,
        required: required || location == Location::Path,
        description: parameter
            .get("description")
            .and_then(Value::as_str)
            .filter(|d| !d.trim().is_empty()),
        schema,
    }))
}

/// The `{name}`s of a path template, in order.
fn path_variables(path: &str) -> Vec<&str> {
    let mut names = Vec::new();
    rewrite_variables(path, |name| {
        names.push(name);
        name.to_owned()
    });
    names
}

/// `path` with each `{name}` replaced by `{rename(name)}`, in one pass.
pub(crate) fn rewrite_variables<'p>(
    path: &'p str,
    mut rename: impl FnMut(&'p str) -> String,
) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else {
            break;
        };
        out.push_str(&rest[..=start]);
        out.push_str(&rename(&after[..end]));
        out.push('}');
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn merges_inlines_and_filters_parameters() {
        let document = json!({"components": {"parameters": {
            "Limit": {"name": "limit", "in": "query", "schema": {"type": "integer"}},
        }}});
        let item = json!({"parameters": [
            {"name": "id", "in": "path", "description": "the id", "schema": {"type": "string"}},
            {"name": "limit", "in": "query", "description": "old"},
        ]});
        let operation = json!({"parameters": [
            {"$ref": "#/components/parameters/Limit"},
            {"name": "Accept", "in": "header"},
            {"name": "session", "in": "cookie"},
            {"name": "X-Trace", "in": "header", "required": true,
             "content": {"text/plain": {"schema": {"type": "string"}}}},
        ]});
        let params = collect(&document, &item, &operation, "/things/{id}/{part}").unwrap();
        let summary: Vec<_> = params
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.location,
                    p.required,
                    p.description,
                    p.schema.cloned(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "id",
                    Location::Path,
                    true,
                    Some("the id"),
                    Some(json!({"type": "string"}))
                ),
                (
                    "limit",
                    Location::Query,
                    false,
                    None,
                    Some(json!({"type": "integer"}))
                ),
                (
                    "X-Trace",
                    Location::Header,
                    true,
                    None,
                    Some(json!({"type": "string"}))
                ),
                ("part", Location::Path, true, None, None),
            ]
        );
    }

    #[test]
    fn refuses_required_cookies_and_external_refs() {
        let cookie = json!({"parameters": [{"name": "sid", "in": "cookie", "required": true}]});
        let err = collect(&json!({}), &json!({}), &cookie, "/").unwrap_err();
        assert_eq!(err, "required cookie parameter \"sid\" is not supported");
        let external = json!({"parameters": [{"$ref": "common.yaml#/Limit"}]});
        let err = collect(&json!({}), &json!({}), &external, "/").unwrap_err();
        assert!(
            err.contains("external $ref \"common.yaml#/Limit\""),
            "{err}"
        );
    }

    #[test]
    fn rewrites_path_variables_in_one_pass() {
        assert_eq!(path_variables("/a/{x}/b/{y-z}{w}"), ["x", "y-z", "w"]);
        let renamed = rewrite_variables("/a/{pet-id}/{pet_id}/{open", |name| {
            if name == "pet-id" {
                "pet_id".into()
            } else {
                format!("{name}_2")
            }
        });
        assert_eq!(renamed, "/a/{pet_id}/{pet_id_2}/{open");
    }
}
