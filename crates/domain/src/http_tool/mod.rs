//! HTTP tools: tools an account describes as one HTTP request instead of
//! uploading code. The server fills the request from the call's input and
//! the account's secrets, sends it, and keeps what the projection selects.

mod body;
mod projection;
mod template;
mod url_template;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use body::render_body;
pub use projection::{Projection, ProjectionSpec};
pub use template::{is_secret_name, Part, Template, Values};
pub use url_template::UrlTemplate;

use crate::ValidationError;

/// Most query parameters, and most headers, one tool may template.
pub const MAX_TEMPLATED_FIELDS: usize = 64;

/// How the request body is encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum BodyType {
    /// `application/json`.
    #[default]
    Json,
    /// `application/x-www-form-urlencoded`, from an object of scalars.
    Form,
}

/// The `http` object of a manifest whose `kind` is `http`, as sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct HttpRequestSpec {
    /// `GET`, `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE` or `OPTIONS`.
    pub method: String,
    /// An RFC 6570 URI template over the input's top-level properties,
    /// e.g. `https://api.example.com/pets/{petId}{?limit}`; its scheme and
    /// host are written out.
    pub url: String,
    /// Query parameters: name to value template (`{{input.KEY}}`,
    /// `{{secret.NAME}}`). A parameter whose input is absent is left out;
    /// an array input repeats the parameter.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query: BTreeMap<String, String>,
    /// Headers: name to value template, like `query`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body as a JSON template: a string that is exactly
    /// `{{input.KEY}}` becomes that input value as it is; other strings are
    /// filled as text. Absent inputs are left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// How the body is encoded (`json` unless said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_type: Option<BodyType>,
    /// What of a JSON answer the model gets (all of it unless said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<ProjectionSpec>,
    /// Largest answer read, in bytes; the server's output limit applies
    /// when it is lower or this is unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
}

/// A validated HTTP request description.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpTool {
    /// The request method.
    pub method: http_method::Method,
    /// The URL template.
    pub url: UrlTemplate,
    /// Query parameters in name order.
    pub query: Vec<(String, Template)>,
    /// Headers in name order.
    pub headers: Vec<(String, Template)>,
    /// The body template, checked.
    pub body: Option<Value>,
    /// How the body is encoded.
    pub body_type: BodyType,
    /// The response projection.
    pub projection: Option<Projection>,
    /// The tool's own cap on the answer, if it sets one.
    pub max_response_bytes: Option<u64>,
    secrets: Vec<String>,
    connection: Option<String>,
    spec: HttpRequestSpec,
}

/// HTTP methods an HTTP tool may use.
pub mod http_method {
    /// One of the methods an HTTP tool may use.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Method {
        /// GET.
        Get,
        /// HEAD.
        Head,
        /// POST.
        Post,
        /// PUT.
        Put,
        /// PATCH.
        Patch,
        /// DELETE.
        Delete,
        /// OPTIONS.
        Options,
    }

    impl Method {
        /// Parses a method name, in any case.
        pub fn parse(raw: &str) -> Option<Self> {
            Some(match raw.to_ascii_uppercase().as_str() {
                "GET" => Self::Get,
                "HEAD" => Self::Head,
                "POST" => Self::Post,
                "PUT" => Self::Put,
                "PATCH" => Self::Patch,
                "DELETE" => Self::Delete,
                "OPTIONS" => Self::Options,
                _ => return None,
            })
        }

        /// The method's name in capitals.
        pub fn as_str(self) -> &'static str {
            match self {
                Self::Get => "GET",
                Self::Head => "HEAD",
                Self::Post => "POST",
                Self::Put => "PUT",
                Self::Patch => "PATCH",
                Self::Delete => "DELETE",
                Self::Options => "OPTIONS",
            }
        }
    }
}

/// Headers the server sets itself or that would change how the request
/// travels; a tool may not template them.
const RESERVED_HEADERS: [&str; 9] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "keep-alive",
];

impl HttpTool {
    /// Validates a manifest's `http` object.
    pub fn parse(spec: HttpRequestSpec) -> Result<Self, ValidationError> {
        let method = http_method::Method::parse(&spec.method).ok_or_else(|| {
            ValidationError::new(
                "http.method",
                format!(
                    "{:?} is not one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
                    spec.method
                ),
            )
        })?;
        let url = UrlTemplate::parse(&spec.url)?;
        let query = templates("http.query", &spec.query, |_| true)?;
        let headers = templates("http.headers", &spec.headers, is_header_name)?;
        if let Some(body) = &spec.body {
            if matches!(method, http_method::Method::Get | http_method::Method::Head) {
                return Err(ValidationError::new(
                    "http.body",
                    format!("a {} request has no body", method.as_str()),
                ));
            }
            body::check(body)?;
        }
        let projection = spec.response.as_ref().map(Projection::parse).transpose()?;
        if spec.max_response_bytes == Some(0) {
            return Err(ValidationError::new(
                "http.maxResponseBytes",
                "must be at least 1",
            ));
        }
        let named: Vec<Template> = query
            .iter()
            .chain(&headers)
            .map(|(_, template)| template.clone())
            .chain(spec.body.iter().flat_map(body::templates))
            .collect();
        let secrets = distinct(named.iter().flat_map(Template::secrets));
        let connection = match distinct(named.iter().flat_map(Template::connections)).as_slice() {
            [] => None,
            [one] => Some(one.clone()),
            many => {
                return Err(ValidationError::new(
                    "http",
                    format!(
                        "names the connections {}; a tool acts through one connection",
                        many.join(" and ")
                    ),
                ))
            }
        };
        Ok(Self {
            method,
            url,
            query,
            headers,
            body: spec.body.clone(),
            body_type: spec.body_type.unwrap_or_default(),
            projection,
            max_response_bytes: spec.max_response_bytes,
            secrets,
            connection,
            spec,
        })
    }

    /// The manifest spelling it was parsed from.
    pub fn spec(&self) -> &HttpRequestSpec {
        &self.spec
    }

    /// Every secret its templates name, once each, in name order.
    pub fn secrets(&self) -> &[String] {
        &self.secrets
    }

    /// The OAuth provider whose end-user connection its templates use.
    pub fn connection(&self) -> Option<&str> {
        self.connection.as_deref()
    }
}

/// `names` once each, in order.
fn distinct<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<String> = names.map(str::to_owned).collect();
    names.sort();
    names.dedup();
    names
}

fn templates(
    field: &str,
    entries: &BTreeMap<String, String>,
    name_ok: impl Fn(&str) -> bool,
) -> Result<Vec<(String, Template)>, ValidationError> {
    if entries.len() > MAX_TEMPLATED_FIELDS {
        return Err(ValidationError::new(
            field,
            format!(
                "has {} entries; the limit is {MAX_TEMPLATED_FIELDS}",
                entries.len()
            ),
        ));
    }
    entries
        .iter()
        .map(|(name, source)| {
            let at = format!("{field}.{name}");
            if name.is_empty() || !name_ok(name) {
                return Err(ValidationError::new(
                    at,
                    "is not a name that may be sent (header names are letters, digits and !#$%&'*+-.^_`|~; Host, Content-Length and hop-by-hop headers are set by the server)",
                ));
            }
            if source.chars().any(char::is_control) {
                return Err(ValidationError::new(at, "must not contain control characters"));
            }
            Ok((name.clone(), Template::parse(&at, source)?))
        })
        .collect()
}

/// Whether `name` is a header a tool may send: a token the server does
/// not set itself (`Host`, `Content-Length`, hop-by-hop headers).
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte))
        && !RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(value: Value) -> HttpRequestSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_full_spec_parses_and_names_its_secrets() {
        let tool = HttpTool::parse(spec(json!({
            "method": "post",
            "url": "https://api.test/pets/{petId}",
            "query": {"limit": "{{input.limit}}", "key": "{{secret.API_KEY}}"},
            "headers": {"Authorization": "Bearer {{secret.TOKEN}}"},
            "body": {"name": "{{input.name}}", "note": "by {{secret.TOKEN}}"},
            "response": {"jmesPath": "id"},
        })))
        .unwrap();
        assert_eq!(tool.method, http_method::Method::Post);
        assert_eq!(tool.url.host(), "api.test");
        assert_eq!(tool.secrets(), ["API_KEY", "TOKEN"]);
        assert_eq!(tool.connection(), None);
    }

    #[test]
    fn a_tool_acts_through_one_connection() {
        let tool = HttpTool::parse(spec(json!({
            "method": "GET",
            "url": "https://api.test/me",
            "headers": {"Authorization": "Bearer {{connection.github.access_token}}"},
        })))
        .unwrap();
        assert_eq!(tool.connection(), Some("github"));
        let two = HttpTool::parse(spec(json!({
            "method": "POST",
            "url": "https://api.test/me",
            "headers": {"Authorization": "Bearer {{connection.github.access_token}}"},
            "body": {"other": "{{connection.gitlab.access_token}}"},
        })))
        .unwrap_err();
        assert_eq!(two.field, "http");
    }

    #[test]
    fn bad_specs_name_their_field() {
        for (bad, field) in [
            (
                json!({"method": "TRACE", "url": "https://a.test/"}),
                "http.method",
            ),
            (json!({"method": "GET", "url": "https://{h}/"}), "http.url"),
            (
                json!({"method": "GET", "url": "https://a.test/", "headers": {"Host": "x"}}),
                "http.headers.Host",
            ),
            (
                json!({"method": "GET", "url": "https://a.test/", "headers": {"X": "a\nb"}}),
                "http.headers.X",
            ),
            (
                json!({"method": "GET", "url": "https://a.test/", "query": {"q": "{{nope}}"}}),
                "http.query.q",
            ),
            (
                json!({"method": "GET", "url": "https://a.test/", "body": {}}),
                "http.body",
            ),
            (
                json!({"method": "GET", "url": "https://a.test/", "maxResponseBytes": 0}),
                "http.maxResponseBytes",
            ),
        ] {
            let err = HttpTool::parse(spec(bad.clone())).unwrap_err();
            assert_eq!(err.field, field, "{bad}");
        }
    }
}
