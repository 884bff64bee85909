//! The error every domain parser returns: which field, and what is wrong.

/// A value that failed validation, naming the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// The request field that was invalid, in its wire spelling (e.g. `inputSchema`).
    pub field: String,
    /// A human-readable explanation of the problem.
    pub message: String,
}

impl ValidationError {
    /// Builds an error for `field` with `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Refuses text that contains U+0000: no stored text can hold it, so input
/// carrying one is refused at the edge, naming `field`.
pub fn refuse_nul_text(field: &str, text: &str) -> Result<(), ValidationError> {
    if text.contains('\0') {
        return Err(nul_error(field, ""));
    }
    Ok(())
}

/// [`refuse_nul_text`] for every string and object key inside a JSON value;
/// the message points at the first one found.
pub fn refuse_nul(field: &str, value: &serde_json::Value) -> Result<(), ValidationError> {
    match find_nul(value, String::new()) {
        Some(pointer) => Err(nul_error(field, &pointer)),
        None => Ok(()),
    }
}

fn find_nul(value: &serde_json::Value, pointer: String) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::String(text) if text.contains('\0') => Some(pointer),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(index, item)| find_nul(item, format!("{pointer}/{index}"))),
        Value::Object(entries) => entries.iter().find_map(|(key, item)| {
            let here = format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"));
            if key.contains('\0') {
                Some(here)
            } else {
                find_nul(item, here)
            }
        }),
        _ => None,
    }
}

fn nul_error(field: &str, pointer: &str) -> ValidationError {
    let at = if pointer.is_empty() {
        String::new()
    } else {
        format!(" (at {})", pointer.replace('\0', "\\u0000"))
    };
    ValidationError::new(
        field,
        format!("must not contain the NUL character U+0000{at}"),
    )
}

/// Largest whole number a JSON float holds exactly (2^53).
const EXACT_FLOAT_LIMIT: f64 = 9_007_199_254_740_992.0;

/// A JSON number as JSON Schema's `integer` reads it, whole whatever its
/// spelling (`25` and `25.0` alike); `None` for fractions, other values,
/// numbers outside `u64`, and floats past 2^53 (which no longer hold the
/// number that was written).
pub fn whole_u64(value: &serde_json::Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        let x = value.as_f64()?;
        (x.fract() == 0.0 && (0.0..=EXACT_FLOAT_LIMIT).contains(&x)).then_some(x as u64)
    })
}

/// [`whole_u64`] for numbers inside `i64`.
pub fn whole_i64(value: &serde_json::Value) -> Option<i64> {
    value.as_i64().or_else(|| {
        let x = value.as_f64()?;
        (x.fract() == 0.0 && (-EXACT_FLOAT_LIMIT..=EXACT_FLOAT_LIMIT).contains(&x))
            .then_some(x as i64)
    })
}

/// `text` cut to at most `max` bytes (on a character boundary), marked with
/// `…`: for messages that quote input.
pub fn abbreviate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nul_is_found_in_text_values_and_keys() {
        assert!(refuse_nul_text("name", "plain").is_ok());
        assert_eq!(refuse_nul_text("name", "a\0b").unwrap_err().field, "name");
        assert!(refuse_nul("config", &json!({"a": ["b", 1, null]})).is_ok());
        let in_value = refuse_nul("config", &json!({"a": [1, "x\0"]})).unwrap_err();
        assert!(in_value.message.contains("/a/1"), "{}", in_value.message);
        let in_key = refuse_nul("config", &json!({"k\0": 1})).unwrap_err();
        assert!(in_key.message.contains("/k\\u0000"), "{}", in_key.message);
    }

    #[test]
    fn whole_numbers_are_read_whatever_their_spelling() {
        assert_eq!(whole_u64(&json!(25)), Some(25));
        assert_eq!(whole_u64(&json!(25.0)), Some(25));
        assert_eq!(whole_u64(&json!(25.5)), None);
        assert_eq!(whole_u64(&json!(-1)), None);
        assert_eq!(whole_i64(&json!(-3.0)), Some(-3));
        assert_eq!(whole_i64(&json!(1e300)), None);
        assert_eq!(whole_i64(&json!(-9.223372036854776e18)), None);
        assert_eq!(whole_u64(&json!("25")), None);
    }

    #[test]
    fn abbreviate_cuts_on_a_character_boundary() {
        assert_eq!(abbreviate("short", 10), "short");
        assert_eq!(abbreviate("ééé", 3), "é…");
    }
}
