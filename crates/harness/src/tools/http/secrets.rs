//! An HTTP tool's secrets for one call: opened in the server just before
//! the request, and scrubbed from whatever comes back.

use std::collections::HashMap;

use serde_json::Value;
use sqlx::PgPool;
use toolserver_domain::http_tool::Values;
use toolserver_domain::AccountId;
use toolserver_store::account_secrets;

use super::super::{Failure, FailureKind};
use crate::sealing::SecretBox;

/// The opened values of the secrets one call names, and the access token
/// of the connection it acts through.
#[derive(Default)]
pub(super) struct OpenSecrets {
    secrets: HashMap<String, String>,
    connection: Option<(String, String)>,
}

/// What stands in for a secret's value wherever one would be shown.
const REDACTED: &str = "[redacted]";

/// Opens the secrets `names` of `account`; a secret that is not set fails
/// the call, naming it.
pub(super) async fn resolve(
    pool: &PgPool,
    sealer: &SecretBox,
    account: &AccountId,
    names: &[String],
) -> Result<OpenSecrets, Failure> {
    if names.is_empty() {
        return Ok(OpenSecrets::default());
    }
    let sealed = account_secrets::sealed(pool, account, names)
        .await
        .map_err(|err| {
            Failure::new(
                FailureKind::Unreachable,
                format!("the account's secrets could not be read: {err}"),
            )
        })?;
    let mut open = HashMap::new();
    for (name, blob) in sealed {
        let value = sealer
            .open_account_secret(&blob, account, &name)
            .map_err(|err| Failure::tool(format!("secret {name}: {err}")))?;
        open.insert(name, value);
    }
    if let Some(missing) = names.iter().find(|name| !open.contains_key(*name)) {
        return Err(Failure::tool(format!(
            "the secret {missing} is not set in this account (PUT /accounts/me/secrets/{missing})"
        )));
    }
    Ok(OpenSecrets {
        secrets: open,
        connection: None,
    })
}

impl OpenSecrets {
    /// What scrubs these values from text.
    pub(super) fn redactor(&self) -> Redactor {
        let mut values: Vec<String> = self
            .secrets
            .values()
            .chain(self.connection.iter().map(|(_, token)| token))
            .filter(|value| !value.is_empty())
            .cloned()
            .collect();
        // Longest first, so a value containing another is scrubbed whole.
        values.sort_by_key(|value| std::cmp::Reverse(value.len()));
        Redactor(values)
    }

    /// The value of `name`, if it was opened.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.secrets.get(name).map(String::as_str)
    }

    /// Adds the access token of the connection to `provider`.
    pub(super) fn add_connection(&mut self, provider: &str, token: String) {
        self.connection = Some((provider.to_owned(), token));
    }

    /// The access token of the connection to `provider`, if it was opened.
    pub(super) fn connection(&self, provider: &str) -> Option<&str> {
        self.connection
            .as_ref()
            .filter(|(opened, _)| opened == provider)
            .map(|(_, token)| token.as_str())
    }
}

/// Replaces secret values with `[redacted]`, so an upstream that echoes a
/// credential (in an error, or an answer) does not hand it to the model,
/// the ledger or the logs.
#[derive(Debug, Clone, Default)]
pub struct Redactor(Vec<String>);

impl Redactor {
    /// `text` with every secret value replaced.
    pub fn text(&self, text: &str) -> String {
        self.0.iter().fold(text.to_owned(), |text, value| {
            text.replace(value.as_str(), REDACTED)
        })
    }

    /// `value` with every secret value replaced in its strings and keys.
    pub fn value(&self, value: Value) -> Value {
        if self.0.is_empty() {
            return value;
        }
        match value {
            Value::String(text) => Value::String(self.text(&text)),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.value(v)).collect()),
            Value::Object(entries) => Value::Object(
                entries
                    .into_iter()
                    .map(|(key, value)| (self.text(&key), self.value(value)))
                    .collect(),
            ),
            other => other,
        }
    }

    /// `bytes` with every secret value replaced.
    pub fn bytes(&self, bytes: Vec<u8>) -> Vec<u8> {
        self.0.iter().fold(bytes, |bytes, value| {
            let needle = value.as_bytes();
            let mut out = Vec::with_capacity(bytes.len());
            let mut rest = bytes.as_slice();
            while let Some(at) = rest
                .windows(needle.len())
                .position(|window| window == needle)
            {
                out.extend_from_slice(&rest[..at]);
                out.extend_from_slice(REDACTED.as_bytes());
                rest = &rest[at + needle.len()..];
            }
            out.extend_from_slice(rest);
            out
        })
    }

    /// `failure` with every secret value replaced in its message.
    pub(super) fn failure(&self, failure: Failure) -> Failure {
        Failure::new(failure.kind, self.text(&failure.message))
    }
}

/// A call's input and its opened secrets, as template values.
pub(super) struct CallValues<'a> {
    pub(super) input: &'a Value,
    pub(super) secrets: &'a OpenSecrets,
}

impl Values for CallValues<'_> {
    fn input(&self, key: &str) -> Option<&Value> {
        self.input.get(key)
    }

    fn secret(&self, name: &str) -> Option<&str> {
        self.secrets.get(name)
    }

    fn connection(&self, provider: &str) -> Option<&str> {
        self.secrets.connection(provider)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_are_scrubbed_from_text_and_values() {
        let redactor = Redactor(vec!["tok-123".into()]);
        assert_eq!(redactor.text("bad token tok-123!"), "bad token [redacted]!");
        assert_eq!(
            redactor.bytes(b"tok-123:tok-123".to_vec()),
            b"[redacted]:[redacted]"
        );
        assert_eq!(
            redactor.value(json!({"echo": ["Bearer tok-123"], "tok-123": 1})),
            json!({"echo": ["Bearer [redacted]"], "[redacted]": 1})
        );
    }
}
