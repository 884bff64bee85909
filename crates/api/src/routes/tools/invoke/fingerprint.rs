//! The fingerprint of a direct call's body: SHA-256 of its canonical JSON,
//! `{"config":…,"input":…,"timeoutMs":…}` with every object's keys sorted
//! and no spaces (an absent `config` or `timeoutMs` is `null`), so two
//! bodies that say the same thing in another order or spacing match.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::InvokeBody;

/// SHA-256 of `body`'s canonical form.
pub(super) fn fingerprint(body: &InvokeBody) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(br#"{"config":"#);
    match &body.config {
        Some(config) => write_object(&mut hasher, config.iter()),
        None => hasher.update(b"null"),
    }
    hasher.update(br#","input":"#);
    write_value(&mut hasher, &body.input);
    hasher.update(br#","timeoutMs":"#);
    match body.timeout_ms {
        Some(ms) => hasher.update(ms.to_string().as_bytes()),
        None => hasher.update(b"null"),
    }
    hasher.update(b"}");
    hasher.finalize().into()
}

fn write_value(hasher: &mut Sha256, value: &Value) {
    match value {
        Value::Object(entries) => write_object(hasher, entries.iter()),
        Value::Array(items) => {
            hasher.update(b"[");
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    hasher.update(b",");
                }
                write_value(hasher, item);
            }
            hasher.update(b"]");
        }
        scalar => hasher.update(scalar.to_string().as_bytes()),
    }
}

fn write_object<'a>(hasher: &mut Sha256, entries: impl Iterator<Item = (&'a String, &'a Value)>) {
    let mut entries: Vec<_> = entries.collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    hasher.update(b"{");
    for (index, (key, value)) in entries.into_iter().enumerate() {
        if index > 0 {
            hasher.update(b",");
        }
        hasher.update(Value::from(key.as_str()).to_string().as_bytes());
        hasher.update(b":");
        write_value(hasher, value);
    }
    hasher.update(b"}");
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(raw: Value) -> InvokeBody {
        serde_json::from_value(raw).unwrap()
    }

    #[test]
    fn key_order_and_spacing_do_not_count() {
        let a: InvokeBody = serde_json::from_str(
            r#"{"input": {"a": 1, "b": [{"y": 2, "x": 1}]}, "config": {"k": "v", "j": null}}"#,
        )
        .unwrap();
        let b: InvokeBody = serde_json::from_str(
            r#"{"config":{"j":null,"k":"v"},"input":{"b":[{"x":1,"y":2}],"a":1}}"#,
        )
        .unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
    }

    #[test]
    fn every_part_of_the_body_counts() {
        let base = fingerprint(&body(json!({"input": {"q": "x"}})));
        for other in [
            json!({"input": {"q": "y"}}),
            json!({"input": {"q": "x"}, "config": {}}),
            json!({"input": {"q": "x"}, "timeoutMs": 1000}),
            json!({"input": [{"q": "x"}]}),
        ] {
            assert_ne!(fingerprint(&body(other.clone())), base, "{other}");
        }
    }
}
