//! The model-facing description of an operation.

use serde_json::Value;

/// Longest description the server accepts, in characters.
const MAX_CHARS: usize = 4096;

/// Summary and description joined (or `METHOD /path` when both are blank),
/// marked when deprecated, cut to the server's limit.
pub(crate) fn describe(method: &str, path: &str, operation: &Value) -> String {
    let text = |key: &str| {
        operation
            .get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let joined = match (text("summary"), text("description")) {
        (Some(summary), Some(description)) if description.starts_with(summary) => {
            description.to_owned()
        }
        (Some(summary), Some(description)) if summary.ends_with(['.', '!', '?', ':']) => {
            format!("{summary} {description}")
        }
        (Some(summary), Some(description)) => format!("{summary}. {description}"),
        (Some(one), None) | (None, Some(one)) => one.to_owned(),
        (None, None) => format!("{} {path}", method.to_ascii_uppercase()),
    };
    let deprecated = operation.get("deprecated") == Some(&Value::Bool(true));
    let described = if deprecated {
        format!("Deprecated. {joined}")
    } else {
        joined
    };
    truncate(&described.replace('\0', ""))
}

fn truncate(text: &str) -> String {
    if text.chars().count() <= MAX_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_CHARS - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn joins_summary_and_description() {
        let describe_op = |op: Value| describe("get", "/pet/{petId}", &op);
        assert_eq!(
            describe_op(
                json!({"summary": "Find pet by ID", "description": "Returns a single pet."})
            ),
            "Find pet by ID. Returns a single pet."
        );
        assert_eq!(
            describe_op(json!({"summary": "Add a pet", "description": "Add a pet"})),
            "Add a pet"
        );
        assert_eq!(
            describe_op(json!({"description": "  "})),
            "GET /pet/{petId}"
        );
        assert_eq!(
            describe_op(json!({"summary": "Old.", "deprecated": true})),
            "Deprecated. Old."
        );
        let long = describe_op(json!({"description": "x".repeat(5000)}));
        assert_eq!(long.chars().count(), 4096);
        assert!(long.ends_with('…'));
    }
}
