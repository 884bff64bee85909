//! The request body a tool sends: which media type, and its schema.

use serde_json::Value;

use crate::refs;

/// How the body is encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyType {
    /// JSON.
    Json,
    /// `application/x-www-form-urlencoded`.
    Form,
}

impl BodyType {
    /// The manifest's `bodyType` value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Form => "form",
        }
    }
}

/// The request body of an operation, in a media type the server can send.
#[derive(Debug, PartialEq)]
pub(crate) struct Body<'a> {
    /// The encoding.
    pub body_type: BodyType,
    /// The body's schema, if the media type gives one.
    pub schema: Option<&'a Value>,
    /// Whether the body must be sent.
    pub required: bool,
    /// The request body's description, if any.
    pub description: Option<&'a str>,
}

/// What an operation's request body becomes.
#[derive(Debug, PartialEq)]
pub(crate) enum Selection<'a> {
    /// The operation takes no body.
    None,
    /// A body the tool sends.
    Body(Body<'a>),
    /// An optional body in media types the server cannot send; left out.
    Dropped(String),
}

/// The body of `operation`: JSON when offered (`application/json`, then any
/// other `json` or `+json` type, then `*/*`), else form-encoded; an error
/// when only other media types are offered and the body is required.
pub(crate) fn select<'a>(
    document: &'a Value,
    operation: &'a Value,
) -> Result<Selection<'a>, String> {
    let Some(raw) = operation.get("requestBody") else {
        return Ok(Selection::None);
    };
    let body = refs::inline(document, raw).map_err(|err| format!("request body: {err}"))?;
    let required = body.get("required") == Some(&Value::Bool(true));
    let Some(content) = body
        .get("content")
        .and_then(Value::as_object)
        .filter(|c| !c.is_empty())
    else {
        return Ok(Selection::None);
    };
    let mut offered: Vec<(u8, String, &Value)> = content
        .iter()
        .map(|(media, value)| {
            let essence = media
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            (rank(&essence), essence, value)
        })
        .collect();
    offered.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let Some((rank, _, media)) = offered.first().filter(|(rank, ..)| *rank < UNSUPPORTED) else {
        let types: Vec<&str> = offered
            .iter()
            .map(|(_, essence, _)| essence.as_str())
            .collect();
        let types = types.join(", ");
        if required {
            return Err(format!("request body media type {types} is not supported (only JSON and form-encoded bodies)"));
        }
        return Ok(Selection::Dropped(format!(
            "the optional request body ({types}) is not sent; only JSON and form-encoded bodies are supported"
        )));
    };
    Ok(Selection::Body(Body {
        body_type: if *rank == FORM {
            BodyType::Form
        } else {
            BodyType::Json
        },
        schema: media.get("schema"),
        required,
        description: body
            .get("description")
            .and_then(Value::as_str)
            .filter(|d| !d.trim().is_empty()),
    }))
}

const FORM: u8 = 3;
const UNSUPPORTED: u8 = 4;

/// Preference of a media type (lowest first).
fn rank(essence: &str) -> u8 {
    let subtype = essence.split_once('/').map_or("", |(_, subtype)| subtype);
    match essence {
        "application/json" => 0,
        _ if subtype == "json" || subtype.ends_with("+json") => 1,
        "*/*" => 2,
        "application/x-www-form-urlencoded" => FORM,
        _ => UNSUPPORTED,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn select_from(request_body: Value) -> Result<Option<(BodyType, Option<Value>, bool)>, String> {
        let operation = json!({"requestBody": request_body});
        Ok(match select(&Value::Null, &operation)? {
            Selection::Body(body) => Some((body.body_type, body.schema.cloned(), body.required)),
            Selection::None => None,
            Selection::Dropped(note) => return Err(format!("dropped: {note}")),
        })
    }

    #[test]
    fn prefers_json_then_form() {
        let schema = json!({"type": "object"});
        let json_body = select_from(json!({"required": true, "content": {
            "application/xml": {"schema": {}},
            "application/merge-patch+json; charset=utf-8": {"schema": schema},
            "application/x-www-form-urlencoded": {"schema": {}},
        }}));
        assert_eq!(
            json_body,
            Ok(Some((BodyType::Json, Some(schema.clone()), true)))
        );
        let form = select_from(json!({"content": {
            "application/x-www-form-urlencoded": {"schema": schema},
            "multipart/form-data": {},
        }}));
        assert_eq!(form, Ok(Some((BodyType::Form, Some(schema), false))));
        assert_eq!(
            select_from(json!({"content": {"*/*": {}}})),
            Ok(Some((BodyType::Json, None, false)))
        );
    }

    #[test]
    fn refuses_required_bodies_it_cannot_send_and_drops_optional_ones() {
        let err = select_from(json!({"required": true, "content": {"multipart/form-data": {}}}))
            .unwrap_err();
        assert!(
            err.starts_with("request body media type multipart/form-data is not supported"),
            "{err}"
        );
        let dropped =
            select_from(json!({"content": {"application/octet-stream": {}}})).unwrap_err();
        assert!(dropped.starts_with("dropped: ") && dropped.contains("application/octet-stream"));
        assert_eq!(select_from(json!({"content": {}})), Ok(None));
    }
}
