//! Credentials inside an agent config (`provider.<name>.apiKey`,
//! `tools.<key>.apiKey`, `mcpServers.<name>.auth.token` and the secrets of
//! `channels.<name>`). They are lifted out of the config before it is
//! stored, kept encrypted elsewhere, and shown back only as [`REDACTED`].

use std::collections::BTreeMap;

use serde_json::Value;

use crate::ValidationError;

/// What a stored credential reads as in a config returned to clients. Sending
/// it back in an update keeps the stored credential.
pub const REDACTED: &str = "[redacted]";

/// Credentials by their dotted path in the config, e.g. `provider.openai.apiKey`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Secrets(BTreeMap<String, String>);

impl Secrets {
    /// Moves every credential out of `config`, leaving [`REDACTED`] in its
    /// place. Credentials that already read [`REDACTED`] are taken from
    /// `stored`; one that has no stored value is an error naming its path.
    pub fn lift(config: &mut Value, stored: &Secrets) -> Result<Self, ValidationError> {
        let mut lifted = BTreeMap::new();
        for (path, slot) in credential_slots(config) {
            let Value::String(value) = slot else { continue };
            let kept = if value == REDACTED {
                stored.0.get(&path).cloned().ok_or_else(|| {
                    ValidationError::new(
                        format!("config.{path}"),
                        format!("{REDACTED} stands for a stored key, and none is stored here"),
                    )
                })?
            } else {
                std::mem::replace(value, REDACTED.to_owned())
            };
            lifted.insert(path, kept);
        }
        Ok(Self(lifted))
    }

    /// Puts the credentials back into a config that holds [`REDACTED`] marks.
    pub fn restore(&self, config: &mut Value) {
        for (path, slot) in credential_slots(config) {
            if let Some(value) = self.0.get(&path) {
                *slot = Value::String(value.clone());
            }
        }
    }

    /// Whether there are no credentials.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Every `apiKey` value under `provider.*` and `tools.*`, every
/// `auth.token` under `mcpServers.*` and every secret field under
/// `channels.*`, with its path.
fn credential_slots(config: &mut Value) -> Vec<(String, &mut Value)> {
    let mut slots = Vec::new();
    let Some(object) = config.as_object_mut() else {
        return slots;
    };
    for (section, entries) in object.iter_mut() {
        let paths: &[&[&str]] = match section.as_str() {
            "provider" | "tools" => &[&["apiKey"]],
            "mcpServers" => &[&["auth", "token"]],
            "channels" => &[
                &["signingSecret"],
                &["botToken"],
                &["secretToken"],
                &["secret"],
            ],
            _ => continue,
        };
        let Some(entries) = entries.as_object_mut() else {
            continue;
        };
        for (name, entry) in entries.iter_mut() {
            let Some(fields) = entry.as_object_mut() else {
                continue;
            };
            for (first, value) in fields.iter_mut() {
                let Some(path) = paths.iter().find(|path| path[0] == first.as_str()) else {
                    continue;
                };
                let mut slot = Some(value);
                for step in &path[1..] {
                    slot = slot.and_then(|value| value.as_object_mut()?.get_mut(*step));
                }
                if let Some(value) = slot {
                    slots.push((format!("{section}.{name}.{}", path.join(".")), value));
                }
            }
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn lifts_and_restores_credentials() {
        let original = json!({
            "provider": {"openai": {"apiKey": "sk-1", "baseUrl": "http://x"}},
            "tools": {"tavilySearch": {"apiKey": "tv-1", "maxResults": 3}},
            "channels": {"tg": {"type": "telegram", "botToken": "1:x", "secretToken": "t"}},
        });
        let mut config = original.clone();
        let secrets = Secrets::lift(&mut config, &Secrets::default()).unwrap();
        assert_eq!(config["provider"]["openai"]["apiKey"], REDACTED);
        assert_eq!(config["tools"]["tavilySearch"]["apiKey"], REDACTED);
        assert_eq!(config["channels"]["tg"]["botToken"], REDACTED);
        assert_eq!(config["channels"]["tg"]["secretToken"], REDACTED);
        assert!(!config.to_string().contains("sk-1"));
        let mut restored = config.clone();
        secrets.restore(&mut restored);
        assert_eq!(restored, original);
    }

    #[test]
    fn redacted_marks_keep_stored_values_or_fail() {
        let mut first = json!({"provider": {"openai": {"apiKey": "sk-1"}}});
        let stored = Secrets::lift(&mut first, &Secrets::default()).unwrap();
        let mut update = json!({"provider": {"openai": {"apiKey": REDACTED}}});
        let kept = Secrets::lift(&mut update, &stored).unwrap();
        assert_eq!(kept, stored);
        let mut unknown = json!({"tools": {"tavilySearch": {"apiKey": REDACTED}}});
        let err = Secrets::lift(&mut unknown, &stored).unwrap_err();
        assert_eq!(err.field, "config.tools.tavilySearch.apiKey");
    }
}
