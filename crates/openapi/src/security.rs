//! Authentication: the headers or query parameters that carry an
//! operation's credentials, as secret or connection placeholders.

use serde_json::Value;

use crate::{refs, ImportOptions};

/// Where an operation's credentials go.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Auth {
    /// Header name and value template.
    pub headers: Vec<(String, String)>,
    /// Query parameter name and value template.
    pub query: Vec<(String, String)>,
    /// Why no credentials are sent, when the operation asks for some.
    pub note: Option<String>,
}

/// The credentials of the first scheme in the operation's effective security
/// requirements (its own `security`, else the document's) that can be
/// expressed with the options given; none when an empty requirement comes
/// first or nothing can be expressed.
pub(crate) fn auth(document: &Value, operation: &Value, options: &ImportOptions) -> Auth {
    let requirements = operation
        .get("security")
        .or_else(|| document.get("security"))
        .and_then(Value::as_array);
    let mut unexpressed = Vec::new();
    for requirement in requirements.into_iter().flatten() {
        let Some(schemes) = requirement.as_object() else {
            continue;
        };
        if schemes.is_empty() {
            return Auth::default();
        }
        for name in schemes.keys() {
            match express(document, name, options) {
                Ok(auth) => return auth,
                Err(why) => unexpressed.push(why),
            }
        }
    }
    Auth {
        note: (!unexpressed.is_empty())
            .then(|| format!("no credentials are sent: {}", unexpressed.join("; "))),
        ..Auth::default()
    }
}

fn express(document: &Value, name: &str, options: &ImportOptions) -> Result<Auth, String> {
    let scheme = document
        .pointer("/components/securitySchemes")
        .and_then(|schemes| schemes.get(name))
        .ok_or_else(|| format!("security scheme {name:?} is not defined"))
        .and_then(|scheme| refs::inline(document, scheme))?;
    let field = |key: &str| scheme.get(key).and_then(Value::as_str).unwrap_or_default();
    let secret = || {
        options
            .secret
            .as_deref()
            .map(|secret| format!("{{{{secret.{secret}}}}}"))
            .ok_or_else(|| format!("scheme {name:?} needs the secret option"))
    };
    let mut auth = Auth::default();
    match field("type") {
        "http" if field("scheme").eq_ignore_ascii_case("bearer") => {
            auth.headers
                .push(("Authorization".into(), format!("Bearer {}", secret()?)));
        }
        "http" => {
            return Err(format!(
                "scheme {name:?} (HTTP {}) is not supported",
                field("scheme")
            ))
        }
        "apiKey" if field("in") == "header" && !field("name").is_empty() => {
            auth.headers.push((field("name").into(), secret()?));
        }
        "apiKey" if field("in") == "query" && !field("name").is_empty() => {
            auth.query.push((field("name").into(), secret()?));
        }
        "oauth2" | "openIdConnect" => {
            let connection = options
                .connection
                .as_deref()
                .ok_or_else(|| format!("scheme {name:?} needs the connection option"))?;
            auth.headers.push((
                "Authorization".into(),
                format!("Bearer {{{{connection.{connection}.access_token}}}}"),
            ));
        }
        other => {
            return Err(format!(
                "scheme {name:?} (type {other:?}, in {:?}) is not supported",
                field("in")
            ))
        }
    }
    Ok(auth)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn document(security: Value) -> Value {
        json!({
            "security": security,
            "components": {"securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "basic": {"type": "http", "scheme": "basic"},
                "header_key": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "query_key": {"type": "apiKey", "in": "query", "name": "api_key"},
                "oauth": {"type": "oauth2", "flows": {}},
                "linked": {"$ref": "#/components/securitySchemes/bearer"},
            }},
        })
    }

    fn options(secret: Option<&str>, connection: Option<&str>) -> ImportOptions {
        ImportOptions {
            secret: secret.map(str::to_owned),
            connection: connection.map(str::to_owned),
            ..ImportOptions::default()
        }
    }

    fn header(name: &str, value: &str) -> Auth {
        Auth {
            headers: vec![(name.into(), value.into())],
            ..Auth::default()
        }
    }

    #[test]
    fn expresses_schemes_as_placeholders() {
        let both = options(Some("TOKEN"), Some("github"));
        let op = json!({});
        assert_eq!(
            auth(&document(json!([{"bearer": []}])), &op, &both),
            header("Authorization", "Bearer {{secret.TOKEN}}")
        );
        assert_eq!(
            auth(&document(json!([{"linked": []}])), &op, &both),
            header("Authorization", "Bearer {{secret.TOKEN}}")
        );
        assert_eq!(
            auth(&document(json!([{"header_key": []}])), &op, &both),
            header("X-API-Key", "{{secret.TOKEN}}")
        );
        assert_eq!(
            auth(&document(json!([{"query_key": []}])), &op, &both),
            Auth {
                query: vec![("api_key".into(), "{{secret.TOKEN}}".into())],
                ..Auth::default()
            }
        );
        assert_eq!(
            auth(&document(json!([{"oauth": ["read"]}])), &op, &both),
            header("Authorization", "Bearer {{connection.github.access_token}}")
        );
    }

    #[test]
    fn operation_security_overrides_and_empty_requirements_mean_none() {
        let both = options(Some("TOKEN"), Some("github"));
        let doc = document(json!([{"bearer": []}]));
        assert_eq!(auth(&doc, &json!({"security": []}), &both), Auth::default());
        assert_eq!(
            auth(&doc, &json!({"security": [{}, {"bearer": []}]}), &both),
            Auth::default()
        );
        assert_eq!(
            auth(&doc, &json!({"security": [{"oauth": []}]}), &both),
            header("Authorization", "Bearer {{connection.github.access_token}}")
        );
    }

    #[test]
    fn falls_through_to_a_scheme_it_can_express_or_notes_why_not() {
        let doc = document(json!([{"basic": []}, {"bearer": []}, {"oauth": []}]));
        let connection_only = options(None, Some("github"));
        assert_eq!(
            auth(&doc, &json!({}), &connection_only),
            header("Authorization", "Bearer {{connection.github.access_token}}")
        );
        let none = auth(&doc, &json!({}), &options(None, None));
        assert!(none.headers.is_empty() && none.query.is_empty());
        let note = none.note.unwrap();
        assert!(note.contains("(HTTP basic) is not supported"), "{note}");
        assert!(note.contains("needs the secret option"), "{note}");
        assert!(note.contains("needs the connection option"), "{note}");
    }
}
