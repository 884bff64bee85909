//! The body template of an HTTP tool: JSON whose strings are templates.

use serde_json::{Map, Value};

use super::template::{Template, Values};
use crate::ValidationError;

/// Checks every string in `body` parses as a template.
pub(super) fn check(body: &Value) -> Result<(), ValidationError> {
    match body {
        Value::String(source) => Template::parse("http.body", source).map(drop),
        Value::Array(items) => items.iter().try_for_each(check),
        Value::Object(entries) => entries.values().try_for_each(check),
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

/// The templates of `body`'s strings.
pub(super) fn templates(body: &Value) -> Vec<Template> {
    match body {
        Value::String(source) => Template::parse("http.body", source).into_iter().collect(),
        Value::Array(items) => items.iter().flat_map(templates).collect(),
        Value::Object(entries) => entries.values().flat_map(templates).collect(),
        Value::Null | Value::Bool(_) | Value::Number(_) => Vec::new(),
    }
}

/// The body for one call: `None` when the whole body is one absent input.
pub fn render_body(body: &Value, values: &dyn Values) -> Option<Value> {
    match body {
        Value::String(source) => {
            let template = Template::parse("http.body", source).ok()?;
            match template.sole_input() {
                Some(key) => values.input(key).filter(|v| !v.is_null()).cloned(),
                None => template.render(values).map(Value::String),
            }
        }
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .filter_map(|item| render_body(item, values))
                .collect(),
        )),
        Value::Object(entries) => Some(Value::Object(
            entries
                .iter()
                .filter_map(|(key, value)| Some((key.clone(), render_body(value, values)?)))
                .collect::<Map<String, Value>>(),
        )),
        other => Some(other.clone()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct Input(Value);

    impl Values for Input {
        fn input(&self, key: &str) -> Option<&Value> {
            self.0.get(key)
        }
        fn secret(&self, _: &str) -> Option<&str> {
            Some("s3cr3t")
        }
        fn connection(&self, _: &str) -> Option<&str> {
            None
        }
    }

    #[test]
    fn bodies_keep_types_and_drop_absent_inputs() {
        let body = json!({"pet": "{{input.pet}}", "n": "{{input.n}}", "note": "hi {{input.who}}", "sig": "{{secret.K}}", "fixed": [1, "{{input.gone}}"]});
        let values = Input(json!({"pet": {"name": "rex"}, "n": 2}));
        assert_eq!(
            render_body(&body, &values),
            Some(json!({"pet": {"name": "rex"}, "n": 2, "sig": "s3cr3t", "fixed": [1]}))
        );
        assert_eq!(render_body(&json!("{{input.body}}"), &values), None);
        let named: Vec<String> = templates(&body)
            .iter()
            .flat_map(|template| template.secrets().map(str::to_owned))
            .collect();
        assert_eq!(named, ["K"]);
    }
}
