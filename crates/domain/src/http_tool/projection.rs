//! What an HTTP tool keeps of a JSON answer: a JMESPath expression or an
//! RFC 9535 JSONPath query, checked when the tool is saved.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ValidationError;

const FIELD: &str = "http.response";

/// A response projection as the manifest spells it: exactly one of the two.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ProjectionSpec {
    /// A JMESPath expression, e.g. `items[].{id: id, name: name}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jmes_path: Option<String>,
    /// A JSONPath query (RFC 9535), e.g. `$.items[*].name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_path: Option<String>,
}

/// A projection that compiled when it was saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projection {
    /// A JMESPath expression.
    JmesPath(String),
    /// A JSONPath query.
    JsonPath(String),
}

impl Projection {
    /// Parses the manifest's `response`, compiling its expression.
    pub fn parse(spec: &ProjectionSpec) -> Result<Self, ValidationError> {
        let projection = match (&spec.jmes_path, &spec.json_path) {
            (Some(expression), None) => Self::JmesPath(expression.clone()),
            (None, Some(query)) => Self::JsonPath(query.clone()),
            _ => {
                return Err(ValidationError::new(
                    FIELD,
                    "must have exactly one of `jmesPath` and `jsonPath`",
                ))
            }
        };
        projection
            .check()
            .map_err(|err| ValidationError::new(FIELD, err))?;
        Ok(projection)
    }

    /// The manifest spelling.
    pub fn spec(&self) -> ProjectionSpec {
        match self {
            Self::JmesPath(expression) => ProjectionSpec {
                jmes_path: Some(expression.clone()),
                json_path: None,
            },
            Self::JsonPath(query) => ProjectionSpec {
                jmes_path: None,
                json_path: Some(query.clone()),
            },
        }
    }

    /// What the expression selects from `document`. A JSONPath query that
    /// selects one node yields that node, any other number an array.
    pub fn apply(&self, document: &Value) -> Result<Value, String> {
        match self {
            Self::JmesPath(expression) => {
                let compiled = jmespath::compile(expression)
                    .map_err(|err| format!("jmesPath does not compile: {err}"))?;
                let found = compiled
                    .search(document.clone())
                    .map_err(|err| format!("jmesPath failed on the response: {err}"))?;
                serde_json::to_value(&*found)
                    .map_err(|err| format!("jmesPath gave an unusable value: {err}"))
            }
            Self::JsonPath(query) => {
                use jsonpath_rust::JsonPath;
                let mut found = document
                    .query(query)
                    .map_err(|err| format!("jsonPath failed on the response: {err}"))?;
                Ok(if found.len() == 1 {
                    found.remove(0).clone()
                } else {
                    Value::Array(found.into_iter().cloned().collect())
                })
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        match self {
            Self::JmesPath(expression) => jmespath::compile(expression)
                .map(drop)
                .map_err(|err| format!("jmesPath does not compile: {err}")),
            Self::JsonPath(query) => jsonpath_rust::parser::parse_json_path(query)
                .map(drop)
                .map_err(|err| format!("jsonPath does not parse: {err}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(jmes: Option<&str>, json: Option<&str>) -> ProjectionSpec {
        ProjectionSpec {
            jmes_path: jmes.map(str::to_owned),
            json_path: json.map(str::to_owned),
        }
    }

    #[test]
    fn both_languages_select() {
        let doc = json!({"items": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}], "total": 2});
        let jmes = Projection::parse(&spec(Some("items[].name"), None)).unwrap();
        assert_eq!(jmes.apply(&doc).unwrap(), json!(["a", "b"]));
        let one = Projection::parse(&spec(None, Some("$.total"))).unwrap();
        assert_eq!(one.apply(&doc).unwrap(), json!(2));
        let many = Projection::parse(&spec(None, Some("$.items[*].id"))).unwrap();
        assert_eq!(many.apply(&doc).unwrap(), json!([1, 2]));
    }

    #[test]
    fn bad_expressions_are_refused_when_saved() {
        for bad in [
            spec(Some("items[."), None),
            spec(None, Some("$.items[?(")),
            spec(None, None),
            spec(Some("a"), Some("$.a")),
        ] {
            assert_eq!(Projection::parse(&bad).unwrap_err().field, "http.response");
        }
    }
}
