//! JSON with every object's keys in sorted order. `serde_json`'s maps keep
//! insertion order in this build (`cedar-policy` turns on its
//! `preserve_order`), while Postgres `jsonb` keeps its own order: a value
//! shown both as it came and as read back from `jsonb` (an invoke's result
//! and its replay) or compared as text (`openapi.yaml`) is sorted first.

use serde_json::Value;

/// `value` with every object's keys in sorted order, at every depth.
pub fn sorted_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            entries
                .into_iter()
                .map(|(key, value)| (key, sorted_keys(value)))
                .collect()
        }
        Value::Array(items) => items.into_iter().map(sorted_keys).collect(),
        scalar => scalar,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keys_come_out_sorted_at_every_depth() {
        let value = json!({"runs": 1, "random": 0.5, "input": {"q": "x", "a": [{"z": 1, "b": 2}]}});
        assert_eq!(
            sorted_keys(value).to_string(),
            r#"{"input":{"a":[{"b":2,"z":1}],"q":"x"},"random":0.5,"runs":1}"#
        );
    }
}
