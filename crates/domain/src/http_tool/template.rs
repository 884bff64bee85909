//! Value templates of HTTP tools: text with `{{input.KEY}}`,
//! `{{secret.NAME}}` and `{{connection.PROVIDER.access_token}}`
//! placeholders, parsed once when a tool is saved.

use std::fmt::Write as _;

use serde_json::Value;

use crate::ValidationError;

/// One piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text sent as it is.
    Literal(String),
    /// The input's top-level property of this name.
    Input(String),
    /// The account secret of this name, resolved in the server at call time.
    Secret(String),
    /// The access token of the end user's connection to this OAuth
    /// provider, resolved (and refreshed) in the server at call time.
    Connection(String),
}

/// Text with placeholders: `{{input.KEY}}` (KEY: any characters up to the
/// closing braces), `{{secret.NAME}}` and
/// `{{connection.PROVIDER.access_token}}` (NAME, PROVIDER: 1-64 letters,
/// digits, `_`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    parts: Vec<Part>,
}

/// Where a template's values come from at call time.
pub trait Values {
    /// The input property `key`, if the call's input has it.
    fn input(&self, key: &str) -> Option<&Value>;
    /// The secret `name`'s value; every secret a template names was
    /// resolved before rendering.
    fn secret(&self, name: &str) -> Option<&str>;
    /// The access token of the connection to `provider`; every connection
    /// a template names was resolved before rendering.
    fn connection(&self, provider: &str) -> Option<&str>;
}

impl Template {
    /// Parses `source`; `field` names it in a refusal.
    pub fn parse(field: &str, source: &str) -> Result<Self, ValidationError> {
        let mut parts = Vec::new();
        let mut rest = source;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let after = &rest[open + 2..];
            let Some(close) = after.find("}}") else {
                return Err(ValidationError::new(
                    field,
                    "has a `{{` placeholder without its closing `}}`",
                ));
            };
            parts.push(placeholder(field, after[..close].trim())?);
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Ok(Self {
            source: source.to_owned(),
            parts,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Its pieces in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The input key when the template is exactly one `{{input.KEY}}`.
    pub fn sole_input(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [Part::Input(key)] => Some(key),
            _ => None,
        }
    }

    /// The secrets it names.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Secret(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// The OAuth providers whose connections it names.
    pub fn connections(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Connection(provider) => Some(provider.as_str()),
            _ => None,
        })
    }

    /// The text with every placeholder filled: `None` when an input it
    /// names is absent or null (the header or parameter is then left out)
    /// or a secret is unknown. Strings are inserted as they are; other
    /// values as JSON.
    pub fn render(&self, values: &dyn Values) -> Option<String> {
        let mut text = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(literal) => text.push_str(literal),
                Part::Input(key) => match values.input(key)? {
                    Value::Null => return None,
                    Value::String(value) => text.push_str(value),
                    other => {
                        let _ = write!(text, "{other}");
                    }
                },
                Part::Secret(name) => text.push_str(values.secret(name)?),
                Part::Connection(provider) => text.push_str(values.connection(provider)?),
            }
        }
        Some(text)
    }
}

/// Whether `name` is a secret's name: 1-64 letters, digits or `_`.
pub fn is_secret_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

fn placeholder(field: &str, inner: &str) -> Result<Part, ValidationError> {
    if let Some(key) = inner.strip_prefix("input.") {
        if key.is_empty() {
            return Err(ValidationError::new(
                field,
                "`{{input.}}` names no input property",
            ));
        }
        return Ok(Part::Input(key.to_owned()));
    }
    if let Some(name) = inner.strip_prefix("secret.") {
        if !is_secret_name(name) {
            return Err(ValidationError::new(
                field,
                format!("`{{{{secret.{name}}}}}`: a secret's name is 1-64 letters, digits or '_'"),
            ));
        }
        return Ok(Part::Secret(name.to_owned()));
    }
    if let Some(rest) = inner.strip_prefix("connection.") {
        let provider = rest.strip_suffix(".access_token").unwrap_or_default();
        if !is_secret_name(provider) {
            return Err(ValidationError::new(
                field,
                format!("`{{{{connection.{rest}}}}}`: write `{{{{connection.PROVIDER.access_token}}}}`, PROVIDER being 1-64 letters, digits or '_'"),
            ));
        }
        return Ok(Part::Connection(provider.to_owned()));
    }
    Err(ValidationError::new(
        field,
        format!(
            "`{{{{{inner}}}}}` is not a placeholder: use `{{{{input.KEY}}}}`, `{{{{secret.NAME}}}}` or `{{{{connection.PROVIDER.access_token}}}}`"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    struct Fixed(Value, HashMap<&'static str, &'static str>);

    impl Values for Fixed {
        fn input(&self, key: &str) -> Option<&Value> {
            self.0.get(key)
        }
        fn secret(&self, name: &str) -> Option<&str> {
            self.1.get(name).copied()
        }
        fn connection(&self, provider: &str) -> Option<&str> {
            (provider == "github").then_some("gho_user")
        }
    }

    #[test]
    fn connection_placeholders_name_their_provider() {
        let template = Template::parse("h", "Bearer {{connection.github.access_token}}").unwrap();
        assert_eq!(template.connections().collect::<Vec<_>>(), ["github"]);
        let values = Fixed(json!({}), HashMap::new());
        assert_eq!(template.render(&values).as_deref(), Some("Bearer gho_user"));
        let other = Template::parse("h", "{{connection.gitlab.access_token}}").unwrap();
        assert_eq!(other.render(&values), None);
    }

    #[test]
    fn placeholders_fill_from_input_and_secrets() {
        let template = Template::parse(
            "h",
            "Bearer {{secret.TOKEN}} for {{ input.user-id }}/{{input.n}}",
        )
        .unwrap();
        assert_eq!(template.secrets().collect::<Vec<_>>(), ["TOKEN"]);
        let values = Fixed(
            json!({"user-id": "ann", "n": 3}),
            HashMap::from([("TOKEN", "t0k")]),
        );
        assert_eq!(
            template.render(&values).as_deref(),
            Some("Bearer t0k for ann/3")
        );
        let missing = Fixed(json!({"n": 3}), HashMap::from([("TOKEN", "t0k")]));
        assert_eq!(template.render(&missing), None);
    }

    #[test]
    fn a_sole_input_placeholder_is_known() {
        assert_eq!(
            Template::parse("b", "{{input.body}}").unwrap().sole_input(),
            Some("body")
        );
        assert_eq!(
            Template::parse("b", "x{{input.body}}")
                .unwrap()
                .sole_input(),
            None
        );
    }

    #[test]
    fn malformed_placeholders_are_refused() {
        for bad in [
            "{{input.}}",
            "{{secret.a-b}}",
            "{{env.HOME}}",
            "{{connection.github}}",
            "{{connection.git-hub.access_token}}",
            "{{connection.github.refresh_token}}",
            "open {{input.x",
        ] {
            let err = Template::parse("headers.x", bad).unwrap_err();
            assert_eq!(err.field, "headers.x", "{bad}");
        }
    }
}
